"""Normal draws for initialising factors, float32, on every core, reproducible; and the
rows' order in an epoch (:func:`shuffled`).

Box and Muller's transform (1958) in float32, in loops that vectorise 8 wide: from
u1 in (0, 1] and an angle theta uniform on the circle, z0 = rho cos(theta) and
z1 = rho sin(theta) with rho = sqrt(-2 ln u1). ln by the float's exponent and the atanh
series of its mantissa; cos and sin of phi in [-pi/4, pi/4) by their Taylor
polynomials, theta = phi + pi/4 turned into a random quadrant by two sign bits. Each
pair's two 32-bit words come from a counter-based hash (Wellons' lowbias32, applied
twice, keyed by the chunk). The output is cut into chunks of ``CHUNK`` values, keyed
by a SplitMix64 hash of (key, c) (Steele, Lea and Flood 2014); a chunk's first half
holds its cosines, the second its sines. So the values depend on the key and their
position only, never on the number of threads, and n draws are the first n of any
longer fill. u1 >= 2^-24 bounds |z| by sqrt(48 ln 2) = 5.77: the law's mass beyond
(8e-9) is never drawn.
"""

import math

import numpy as np
from numba import njit

from rafmcli import threads

CHUNK = 1 << 16
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_H1 = np.uint32(0x7FEB352D)  # lowbias32's multipliers
_H2 = np.uint32(0x846CA68B)
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(1 << 32)
LEMIRE_MAX = 1 << 32  # the largest bound :func:`_below` draws under
_U32, _I32, _F32 = np.uint32, np.int32, np.float32
_LN2 = _F32(math.log(2.0))
_SQRT2 = _F32(math.sqrt(2.0))
_HALF_SQRT2 = _F32(math.sqrt(0.5))
_ANGLE_STEP = _F32(2.0**-24 * math.pi / 2)  # a 24-bit integer's step in [0, pi/2)
_QUARTER_PI = _F32(math.pi / 4)


@njit(cache=True, nogil=True, inline="always")
def _mix(z):
    """SplitMix64's output function (a bijection of uint64)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def _lowbias32(x):
    """Wellons' lowbias32 (hash-prospector), a bijection of uint32; every step cast back to
    uint32, since numba widens uint32 arithmetic to 64 bits."""
    x = _U32(x ^ (x >> _U32(16)))
    x = _U32(x * _H1)
    x = _U32(x ^ (x >> _U32(15)))
    x = _U32(x * _H2)
    return _U32(x ^ (x >> _U32(16)))


@njit(cache=True, nogil=True, inline="always")
def _word(counter, k0, k1):
    """The 32 random bits of ``counter`` in the chunk keyed by (k0, k1)."""
    return _lowbias32(_U32(_lowbias32(_U32(counter ^ k0)) + k1))


@njit(cache=True, nogil=True, inline="always")
def _ln(x):
    """ln x for a normal float32 x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), and
    ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^9."""
    bits = _F32(x).view(_U32)
    e = _I32(bits >> _U32(23)) - _I32(127)
    m = _U32(_U32(bits & _U32(0x7FFFFF)) | _U32(0x3F800000)).view(_F32)  # in [1, 2)
    big = m > _SQRT2
    m = m * _F32(0.5) if big else m
    e = e + _I32(1) if big else e
    s = (m - _F32(1.0)) / (m + _F32(1.0))
    s2 = s * s
    series = _F32(1.0) + s2 * (_F32(1 / 3) + s2 * (_F32(1 / 5) + s2 * (_F32(1 / 7) + s2 * _F32(1 / 9))))
    return _F32(2.0) * s * series + _F32(e) * _LN2


@njit(cache=True, nogil=True, error_model="numpy")
def _box_muller(out, k0, k1, scale):
    """A whole chunk (even length): out[p] = scale rho_p cos(theta_p) and
    out[half + p] = scale rho_p sin(theta_p), from the words of counters 2p and 2p + 1:
    u1 = ((a >> 8) + 1) 2^-24, phi from b's top 24 bits, the signs of cos and sin from b's
    two lowest."""
    half = out.shape[0] // 2
    one, two = _F32(1.0), _F32(2.0)
    for p in range(half):
        a = _word(_U32(2 * p), k0, k1)
        b = _word(_U32(2 * p + 1), k0, k1)
        u1 = _F32(_I32(a >> _U32(8)) + _I32(1)) * _F32(2.0**-24)
        rho = np.sqrt(_F32(-2.0) * _ln(u1)) * scale
        phi = _F32(_I32(b >> _U32(8))) * _ANGLE_STEP - _QUARTER_PI
        f2 = phi * phi
        sin_phi = phi * (one + f2 * (_F32(-1 / 6) + f2 * (_F32(1 / 120) + f2 * (_F32(-1 / 5040)
                                                                               + f2 * _F32(1 / 362880)))))
        cos_phi = one + f2 * (_F32(-1 / 2) + f2 * (_F32(1 / 24) + f2 * (_F32(-1 / 720) + f2 * _F32(1 / 40320))))
        cos_sign = one - two * _F32(_I32(b & _U32(1)))
        sin_sign = one - _F32(_I32(b & _U32(2)))
        out[p] = rho * ((cos_phi - sin_phi) * _HALF_SQRT2) * cos_sign  # cos(phi + pi/4)
        out[half + p] = rho * ((sin_phi + cos_phi) * _HALF_SQRT2) * sin_sign


def fill_normal(out, stdev, key, n_threads=None):
    """out[:] = N(0, stdev^2) draws; chunk c of CHUNK values keyed by (key, c), ranges of
    chunks on ``n_threads`` threads (default: every available core)."""
    threads.spread(_fill_chunks, (out.shape[0] + CHUNK - 1) // CHUNK, out, float(stdev), key,
                   threads=n_threads)  # float: an int stdev would compile the kernel a second time


@njit(cache=True, nogil=True)
def _fill_chunks(lo, hi, out, stdev, key):
    n = out.shape[0]
    scale = _F32(stdev)
    for c in range(lo, hi):
        k = _mix(np.uint64(key) ^ _mix(np.uint64(c) * _GOLDEN + _GOLDEN))
        k0, k1 = _U32(k & _LOW32), _U32(k >> np.uint64(32))
        first = c * CHUNK
        if first + CHUNK <= n:
            _box_muller(out[first:first + CHUNK], k0, k1, scale)
        else:  # the last, partial chunk: the first values of a whole one
            whole = np.empty(CHUNK, np.float32)
            _box_muller(whole, k0, k1, scale)
            for i in range(n - first):  # a loop: slice assignment compiles for seconds
                out[first + i] = whole[i]


def shuffled(n, key):
    """A uniform random permutation of range(n) (int64) from the stream of ``key``: Fisher and
    Yates' shuffle, each swap's partner drawn by :func:`_below` (one pass; numpy's
    Generator.permutation takes four to five times as long). Beyond LEMIRE_MAX items,
    numpy's permutation seeded with ``key``."""
    if n > LEMIRE_MAX:
        return np.random.default_rng(key).permutation(n)
    order = np.arange(n, dtype=np.int64)
    _shuffle(order, key)
    return order


@njit(cache=True, nogil=True)
def _shuffle(order, key):
    """Shuffle ``order`` in place: for i = n-1 .. 1, swap order[i] with order[j], j uniform in
    [0, i] (:func:`_below` on the stream of ``key``)."""
    state = _mix(np.uint64(key))
    for i in range(order.shape[0] - 1, 0, -1):
        state, j = _below(state, np.uint64(i + 1))
        order[i], order[j] = order[j], order[i]


@njit(cache=True, nogil=True, inline="always")
def _below(state, bound):
    """(next state, an integer uniform in [0, bound)), 0 < bound <= 2^32: Lemire's
    multiply-shift (``Fast random integer generation in an interval'', 2019) on the high 32
    bits of a SplitMix64 output, drawn again while the product's low half falls below
    2^32 mod bound (the values that would make the result biased)."""
    state += _GOLDEN
    m = (_mix(state) >> np.uint64(32)) * bound
    if (m & _LOW32) < bound:
        floor = (_TWO32 - bound) % bound
        while (m & _LOW32) < floor:
            state += _GOLDEN
            m = (_mix(state) >> np.uint64(32)) * bound
    return state, np.int64(m >> np.uint64(32))
