"""Normal draws for initialising factors, float32, on every core, reproducible; and the
rows' order in an epoch (:func:`shuffled`).

Doornik's ziggurat (``An Improved Ziggurat Method to Generate Normal Random
Samples'', 2005; 128 layers, the layer index and the uniform from disjoint
bits of one 64-bit draw) on SplitMix64 streams (Steele, Lea and Flood 2014).
The output is cut into chunks of ``CHUNK`` values; chunk c draws from its own
stream, started from a hash of (key, c), so the values depend on the key
only, never on the number of threads.
"""

import math

import numpy as np
from numba import njit

from rafmcli import threads

CHUNK = 1 << 16
LAYERS = 128
_R = 3.442619855899  # start of the tail
_AREA = 9.91256303526217e-3  # of every layer


def _tables():
    """x_0 > x_1 = R > ... > x_127 > x_128 = 0, the layers' right edges, and x_{i+1} / x_i."""
    x = np.zeros(LAYERS + 1)
    x[0] = _AREA / math.exp(-0.5 * _R * _R)
    x[1] = _R
    for i in range(2, LAYERS):
        x[i] = math.sqrt(-2.0 * math.log(_AREA / x[i - 1] + math.exp(-0.5 * x[i - 1] ** 2)))
    return x, x[1:] / x[:-1]


_X, _RATIO = _tables()
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ULP = 2.0**-52
_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(1 << 32)
LEMIRE_MAX = 1 << 32  # the largest bound :func:`_below` draws under


@njit(cache=True, nogil=True, inline="always")
def _mix(z):
    """SplitMix64's output function (a bijection of uint64)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def _uniform(state):
    """(next state, uniform in (0, 1])."""
    state += _GOLDEN
    return state, ((_mix(state) >> np.uint64(11)) + np.uint64(1)) * 2.0**-53


@njit(cache=True, nogil=True)
def _normal_slow(state, i, u):
    """The ziggurat's rare cases for a draw (layer i, u) outside layer i's rectangle:
    (next state, the normal draw), drawing afresh when the wedge rejects."""
    while True:
        if i == 0:  # the tail beyond R (Marsaglia's method)
            while True:
                state, a = _uniform(state)
                state, b = _uniform(state)
                x = -math.log(a) / _R
                if -2.0 * math.log(b) >= x * x:
                    return state, (_R + x) if u >= 0 else -(_R + x)
        x = u * _X[i]
        f0 = math.exp(-0.5 * (_X[i] * _X[i] - x * x))
        f1 = math.exp(-0.5 * (_X[i + 1] * _X[i + 1] - x * x))
        state, a = _uniform(state)
        if f1 + a * (f0 - f1) < 1.0:
            return state, x
        state, i, u = _draw(state)
        if abs(u) < _RATIO[i]:
            return state, u * _X[i]


@njit(cache=True, nogil=True, inline="always")
def _draw(state):
    """(next state, layer i, u in [-1, 1)) from one 64-bit output, i and u from disjoint bits."""
    state += _GOLDEN
    bits = _mix(state)
    u = np.int64(bits >> np.uint64(11)) * _ULP - 1.0  # int64: a fast conversion to float
    return state, np.int64(bits & np.uint64(LAYERS - 1)), u


def fill_normal(out, stdev, key, n_threads=None):
    """out[:] = N(0, stdev^2) draws; chunk c of CHUNK values from the stream of (key, c),
    ranges of chunks on ``n_threads`` threads (default: every available core)."""
    threads.spread(_fill_chunks, (out.shape[0] + CHUNK - 1) // CHUNK, out, float(stdev), key,
                   threads=n_threads)  # float: an int stdev would compile the kernel a second time


@njit(cache=True, nogil=True)
def _fill_chunks(lo, hi, out, stdev, key):
    n = out.shape[0]
    scale = np.float32(stdev)
    for c in range(lo, hi):
        state = _mix(np.uint64(key) ^ _mix(np.uint64(c) * _GOLDEN + _GOLDEN))
        for k in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            state, i, u = _draw(state)
            if abs(u) < _RATIO[i]:
                z = u * _X[i]
            else:
                state, z = _normal_slow(state, i, u)
            out[k] = np.float32(z) * scale


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
