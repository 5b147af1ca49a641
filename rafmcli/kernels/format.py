"""Prediction text: float64 values as C's ``printf("%.9g\\n")`` writes them, byte for byte.

``%.9g`` rounds a value to 9 significant digits, D x 10^(X-8) with
10^8 <= D < 10^9 (round half to even on the exact binary value), then writes
it in fixed notation when -4 <= X < 9 and in exponent notation otherwise
(``e+XX``, at least two exponent digits), without trailing zeros or a bare
decimal point; zero is ``0`` (``-0``), infinities ``inf`` and ``-inf``.

D and X come from one correctly rounded float64 scaling, y = |x| 10^(8-X)
(|8-X| <= 22, where 10^k is exact): y is within half an ulp (< 6e-8) of the
exact product, so rounding y to an integer is exact unless y lies within
1e-6 of a half-integer. Those values (about 2 in a million) and values whose
scale needs 10^k beyond 10^22 (|x| < 1e-14 or > 1e30) are rounded exactly in
big-integer arithmetic on x = m 2^k. NaN has no line: the caller refuses it.
"""

import math

import numpy as np
from numba import njit

LINE_MAX = 24  # bytes of the longest line, "-1.23456789e-308\n" is 17
SIG = 9
D_MIN = 100_000_000  # 10^(SIG-1)
D_END = 1_000_000_000  # 10^SIG
TIE_MARGIN = 1e-6
LOG10_2 = 0.30102999566398120
_POW10 = np.array([10.0**k for k in range(23)])

LIMBS = 48  # 32-bit limbs: x 10^s and 2^k for any double stay below 2^1300
_BASE = np.uint64(1 << 32)
_MASK = np.uint64((1 << 32) - 1)


@njit(cache=True, nogil=True)
def _big(value):
    """A big integer (LIMBS little-endian 32-bit limbs in uint64) equal to ``value`` < 2^64."""
    x = np.zeros(LIMBS, dtype=np.uint64)
    x[0] = np.uint64(value) & _MASK
    x[1] = np.uint64(value) >> np.uint64(32)
    return x


@njit(cache=True, nogil=True)
def _mul_small(x, c):
    """x *= c in place, c < 2^32."""
    carry = np.uint64(0)
    c = np.uint64(c)
    for i in range(LIMBS):
        t = x[i] * c + carry
        x[i] = t & _MASK
        carry = t >> np.uint64(32)


@njit(cache=True, nogil=True)
def _shift_left(x, bits):
    """x *= 2^bits in place."""
    limbs, bits = bits // 32, np.uint64(bits % 32)
    for i in range(LIMBS - 1, -1, -1):
        hi = x[i - limbs] << bits if i - limbs >= 0 else np.uint64(0)
        lo = x[i - limbs - 1] >> (np.uint64(32) - bits) if bits and i - limbs - 1 >= 0 else np.uint64(0)
        x[i] = (hi | lo) & _MASK


@njit(cache=True, nogil=True)
def _mul_pow10(x, s):
    """x *= 10^s in place, s >= 0 (steps of 10^9 < 2^32)."""
    while s >= 9:
        _mul_small(x, np.int64(1_000_000_000))  # int64, as every other call: one compile
        s -= 9
    _mul_small(x, 10**s)


@njit(cache=True, nogil=True)
def _compare(x, y):
    for i in range(LIMBS - 1, -1, -1):
        if x[i] != y[i]:
            return 1 if x[i] > y[i] else -1
    return 0


@njit(cache=True, nogil=True)
def _subtract(x, y):
    """x -= y in place (x >= y)."""
    borrow = np.uint64(0)
    for i in range(LIMBS):
        t = x[i] + _BASE - y[i] - borrow
        x[i] = t & _MASK
        borrow = np.uint64(1) - (t >> np.uint64(32))


@njit(cache=True, nogil=True)
def _times(x, c):
    y = x.copy()
    _mul_small(y, c)
    return y


@njit(cache=True, nogil=True)
def digits_exact(a):
    """(D, X) of %.9g for finite a > 0, in exact big-integer arithmetic."""
    f, e2 = math.frexp(a)
    m = np.uint64(f * 9007199254740992.0)  # 2^53: f has at most 53 significant bits
    k = e2 - 53
    e = int(math.floor(math.log10(a)))
    while True:
        s = SIG - 1 - e
        num, den = _big(m), _big(np.uint64(1))
        if k >= 0:
            _shift_left(num, k)
        else:
            _shift_left(den, -k)
        if s >= 0:
            _mul_pow10(num, s)
        else:
            _mul_pow10(den, -s)
        # q = floor(num / den): a float estimate within 1, then made exact
        q = int(min(max(10.0 ** (math.log10(a) + s), 0.0), 4.0 * D_END))
        while q > 0 and _compare(_times(den, q), num) > 0:
            q -= 1
        while _compare(_times(den, q + 1), num) <= 0:
            q += 1
        if q < D_MIN:
            e -= 1
            continue
        if q >= D_END:
            e += 1
            continue
        rest = num.copy()
        _subtract(rest, _times(den, q))
        _mul_small(rest, np.int64(2))
        side = _compare(rest, den)
        if side > 0 or (side == 0 and q % 2 == 1):
            q += 1
        if q == D_END:
            return D_MIN, e + 1
        return q, e


@njit(cache=True, nogil=True, inline="always")
def digits(a):
    """(D, X) of %.9g for finite a > 0: one float64 scaling, exact fallback near ties."""
    e = int(math.floor((math.frexp(a)[1] - 1) * LOG10_2))  # X or X - 1
    for _ in range(3):
        s = SIG - 1 - e
        if s > 22 or s < -22:
            return digits_exact(a)
        y = a * _POW10[s] if s >= 0 else a / _POW10[-s]
        if y >= D_END:
            e += 1
            continue
        whole = math.floor(y)
        frac = y - whole
        if abs(frac - 0.5) <= TIE_MARGIN:
            return digits_exact(a)
        q = int(whole) + (frac > 0.5)
        if q == D_END:
            return D_MIN, e + 1
        return q, e
    return digits_exact(a)


@njit(cache=True, nogil=True, inline="always")
def _put(out, pos, byte):
    out[pos] = byte
    return pos + 1


@njit(cache=True, nogil=True, inline="always")
def _put_digits(out, start, d, dot):
    """The 9 digits of d from ``out[start]``, a '.' after the first ``dot`` of
    them (written at ``start + dot`` even when dot = 9: past the line's end,
    where the next line overwrites it). Unsigned arithmetic and a fixed trip
    count: Python's signed // and % cost three times as much."""
    d = np.uint64(d)
    ten = np.uint64(10)
    base = np.uint64(start)
    for i in range(SIG - 1, -1, -1):
        q = d // ten
        out[base + np.uint64(i + (i >= dot))] = np.uint8(48 + (d - q * ten))
        d = q
    out[base + np.uint64(dot)] = 46


@njit(cache=True, nogil=True, inline="always")
def write_line(out, pos, x):
    """Write ``x`` as %.9g and a newline into ``out`` at ``pos``; returns the end.

    ``x`` must not be NaN; ``out`` needs LINE_MAX bytes from ``pos``.
    """
    if x < 0 or (x == 0 and math.copysign(1.0, x) < 0):
        pos = _put(out, pos, 45)  # '-'
    a = abs(x)
    if a == 0:
        return _put(out, _put(out, pos, 48), 10)
    if math.isinf(a):
        pos = _put(out, _put(out, _put(out, pos, 105), 110), 102)  # inf
        return _put(out, pos, 10)
    d, e = digits(a)
    used = SIG  # significant digits left once trailing zeros go
    rest, ten = np.uint64(d), np.uint64(10)
    while rest % ten == 0:
        rest //= ten
        used -= 1
    if 0 <= e < SIG:  # fixed notation, e + 1 digits before the point
        _put_digits(out, pos, d, e + 1)
        pos += max(used, e + 1) + (used > e + 1)
    elif -4 <= e < 0:  # fixed notation, "0.000ddd"
        pos = _put(out, _put(out, pos, 48), 46)
        for _ in range(-e - 1):
            pos = _put(out, pos, 48)
        _put_digits(out, pos, d, SIG)
        pos += used
    else:  # exponent notation
        _put_digits(out, pos, d, 1)
        pos += used + (used > 1)
        pos = _put(out, _put(out, pos, 101), 45 if e < 0 else 43)  # e-, e+
        e = abs(e)
        if e >= 100:
            pos = _put(out, pos, 48 + e // 100)
        pos = _put(out, _put(out, pos, 48 + e // 10 % 10), 48 + e % 10)
    return _put(out, pos, 10)


@njit(cache=True, nogil=True)
def format_lines(lo, hi, values, chunks, out, ends):
    """Lines of parts lo..hi-1 of ``values`` cut in ``chunks`` parts: part c
    (values c n/chunks .. (c+1) n/chunks) is written from ``out[c * stride]``,
    stride = (n // chunks + 1) * LINE_MAX, and ends at ``ends[c]``."""
    n = values.shape[0]
    stride = (n // chunks + 1) * LINE_MAX
    for c in range(lo, hi):
        pos = c * stride
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            pos = write_line(out, pos, values[i])
        ends[c] = pos
