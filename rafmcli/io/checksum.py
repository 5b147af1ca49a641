"""CRC-32 (zlib's) of large buffers on every core: pieces checksummed side by side, then
combined (zlib's crc32_combine, done here: Python's zlib does not offer it).

Binary-cache arrays are checked on every load (io/cache.py); one core runs zlib.crc32
at about 3 GB/s, so a 300 MB entry cost 0.1 s of every command. Model members are
checked piece by piece with their finiteness (model/files.py), combined here.
"""

import zlib

PIECE = 1 << 23  # bytes checksummed at a time by one thread
CRC32_POLY = 0xEDB88320  # the reflected CRC-32 polynomial of zip and zlib


def crc32(buffer):
    """zlib.crc32 of a contiguous one-dimensional buffer (bytes, memoryview, 1-D numpy array),
    in pieces of PIECE bytes on every core (:func:`pieces_checked`)."""
    return pieces_checked(buffer, PIECE)[0]


def pieces_checked(buffer, piece, visit=None):
    """(zlib.crc32 of ``buffer``, the sum of ``visit(a, b)`` over its pieces): pieces of about
    ``piece`` bytes, ranges of them on every core (one thread below four pieces; zlib releases
    the GIL while it runs). ``visit`` gets each piece's bytes a..b right after their CRC,
    while they are still cached (model/files.py: finiteness of a member's values)."""
    from rafmcli import threads

    data = memoryview(buffer).cast("B")
    size = len(data)
    pieces = max(1, size // piece)

    def check(lo, hi):
        crcs, total = [], 0
        for p in range(lo, hi):
            a, b = p * size // pieces, (p + 1) * size // pieces
            crcs.append((zlib.crc32(data[a:b]), b - a))
            if visit is not None:
                total += visit(a, b)
        return crcs, total

    try:
        done = threads.spread(check, pieces, threads=1 if pieces < 4 else None)
    finally:
        data.release()
    return _combined(crcs for crcs, _ in done), sum(total for _, total in done)


def _combined(ranges):
    """The CRC-32 of consecutive pieces from each range's list of (piece CRC, piece length)."""
    crc = None
    for pieces in ranges:
        for piece_crc, length in pieces:
            crc = piece_crc if crc is None else crc32_combine(crc, piece_crc, length)
    return crc or 0


def _multiply(a, b):
    """a b modulo the CRC-32 polynomial (reflected bit order: bit 31 is x^0)."""
    product, m = 0, 1 << 31
    while a:
        if a & m:
            product ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ CRC32_POLY if b & 1 else b >> 1
    return product


def crc32_combine(crc1, crc2, length2):
    """The CRC-32 of A + B from crc1 = CRC-32(A), crc2 = CRC-32(B) and len(B) (zlib's
    crc32_combine): crc1 times x^(8 len(B)) modulo the polynomial, plus crc2."""
    power, square = 1 << 31, 1 << 30  # x^0, then x^(2^k) for the bits k of 8 len(B)
    n = 8 * length2
    while n:
        if n & 1:
            power = _multiply(power, square)
        square = _multiply(square, square)
        n >>= 1
    return _multiply(power, crc1) ^ crc2
