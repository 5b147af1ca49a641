"""Coordinate updates of FM, RaFM and DiFacto: ALS steps and Gibbs draws (numba).

Every model is linear in each single parameter theta: y_hat = g(x) + theta h(x)
(rafm-notes, "ALS and MCMC for every model"). With residuals e = y - y_hat
over the rows of theta's feature, alpha the noise precision and a Normal
prior (mean mu, precision lam), theta's full conditional is

    theta ~ N(m, 1/p),  p = alpha Sum h^2 + lam,  m = (alpha Sum (e + theta h) h + lam mu) / p,

and ALS takes theta = m (alpha = 1, mu = 0, lam the L2 weight). h is x_i for
w_i and, for coordinate f of v_i^(l) with per-row sums S_l, T_l (Theorem 3):

* x_i (S_{l,f} - v_{i,f}^(l) x_i)  for a feature's top level l = k_i (and every DiFacto block),
* x_i (S_{l,f} - T_{l,f})           for a RaFM dependent level l < k_i.

h does not depend on theta, so after theta moves by d the caches follow in
O(rows of the feature): e -= h d, S_{l,f} += x_i d (and T_{l,f} for l < k_i).

Layout of a sweep (libFM's one coordinate loop over the transposed data):
for each level and block of BLOCK coordinates, S and T of the block are
summed per row (CSR, parallel over rows); then every feature of F_l updates
its BLOCK coordinates one after another. A feature's h_b do not change while
its own coordinates move, so one pass over its rows gathers its h_b and e
into contiguous per-thread buffers, each coordinate then moves on those (e in
the buffer follows every move), and a second pass writes e, S and T back: two
scattered passes over the rows per block instead of two per coordinate, the
exact coordinate-wise sampler.

RaFM's dependent vectors v_i^(l), l < k_i, pair i only with features of top
level l, so the rows alone say little about them. As Algorithm 1 fits them
to the level above, the density gets the distillation factor
exp(-c alpha/2 Sum_rows R_l^2) with R_l = B_{1,l+1} - B_{1,l} = A_{l+1,l+1} -
A_{l,l+1} (rafm-notes, Theorem 3): linear in a dependent coordinate with
h_d = x_i (T_{l,f} - v_{i,f}^(l) x_i), it adds c alpha Sum h_d^2 to the
precision and c alpha Sum (R_l + theta h_d) h_d to the mean's numerator. The
teachers (level l+1) are drawn without it (a cut, like the stop-gradient of
the authors' code), and their moves carry R_l along: R_{l-1} += x_i
(S_{l,f} - v_{i,f} x_i) d for any coordinate of level l.

Features are coloured so that features of one colour never share a row
(a one-hot field is one colour): given the rest they are independent, and a
colour's features are updated in parallel. Random numbers come from a
counter-based generator keyed by (sweep key, parameter index), so a run gives
the same draws, bit for bit, on any number of threads.

Kernels are free of I/O; tunables arrive as arguments (numba freezes globals).
"""

import math

import numpy as np
from numba import njit

BLOCK = 8  # coordinates of one feature updated from one pass over its rows
LOCAL_ROWS = 1 << 20  # features with at most this many rows are gathered into per-thread buffers
SERIAL = 64  # colour of features that could not be coloured: updated one by one

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO53 = 1.0 / 9007199254740992.0
_TAIL_BATCH = 1024  # counters reserved per row for truncated-normal rejection


# --- counter-based random numbers (SplitMix64 streams) ----------------------

@njit(cache=True, inline="always")
def uniform(key, counter):
    """A uniform in (0, 1): SplitMix64's output for state key + counter * golden."""
    z = np.uint64(key) + np.uint64(counter) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return (float(z >> np.uint64(11)) + 0.5) * _TWO53


@njit(cache=True, inline="always")
def normal(key, counter):
    """A standard normal (Box-Muller on the uniforms 2 counter and 2 counter + 1)."""
    c = np.uint64(counter) * np.uint64(2)
    u1 = uniform(key, c)
    u2 = uniform(key, c + np.uint64(1))
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True)
def normals(key, n):
    """``n`` draws of :func:`normal` (tests)."""
    out = np.empty(n)
    for k in range(n):
        out[k] = normal(key, k)
    return out


@njit(cache=True)
def tail_normal(a, key, counter0):
    """X ~ N(0, 1) given X >= a.

    Plain rejection while a <= 0.45 (acceptance >= 0.33); beyond, Robert's
    (1995) exponential proposal with rate (a + sqrt(a^2 + 4)) / 2. Counters
    counter0 .. counter0 + _TAIL_BATCH - 1 are this draw's own.
    """
    c0 = np.uint64(counter0)
    if a <= 0.45:
        for k in range(_TAIL_BATCH // 2):
            z = normal(key, c0 // np.uint64(2) + np.uint64(k))
            if z >= a:
                return z
        return max(a, 0.0)
    rate = 0.5 * (a + math.sqrt(a * a + 4.0))
    for k in range(_TAIL_BATCH // 2):
        z = a - math.log(uniform(key, c0 + np.uint64(2 * k))) / rate
        d = z - rate
        if uniform(key, c0 + np.uint64(2 * k + 1)) <= math.exp(-0.5 * d * d):
            return z
    return a


@njit(cache=True, inline="always")
def tail_mean(a):
    """E[X | X >= a] for X ~ N(0, 1): the inverse Mills ratio phi(a) / (1 - Phi(a))."""
    if a > 30.0:
        return a + 1.0 / a - 2.0 / (a * a * a)
    q = 0.5 * math.erfc(a / math.sqrt(2.0))
    return math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi) / q


@njit(cache=True)
def probit_residuals(scores, labels, draw, key, e):
    """Probit link (libFM's classification): latent z ~ N(score, 1) truncated to z > 0 for a
    positive label, z <= 0 otherwise; e = z - score. Without ``draw``, z is the
    truncated normal's mean (ALS). Returns Sum e^2."""
    total = 0.0
    for r in range(scores.shape[0]):
        s = scores[r]
        if labels[r] > 0:
            t = tail_normal(-s, key, r * _TAIL_BATCH) if draw else tail_mean(-s)
        else:
            t = -(tail_normal(s, key, r * _TAIL_BATCH) if draw else tail_mean(s))
        e[r] = t
        total += t * t
    return total


@njit(cache=True)
def probit_probability(scores):
    """Phi(score): the probit link's probability of a positive label."""
    out = np.empty(scores.shape[0])
    for r in range(scores.shape[0]):
        out[r] = 0.5 * math.erfc(-scores[r] / math.sqrt(2.0))
    return out


# --- colouring and schedules --------------------------------------------------

@njit(cache=True)
def colour(colptr, rows, col_of, order, n_rows):
    """Greedy colours 0..63 such that features of one colour share no row; SERIAL when none is free.

    ``order``: features in the order they pick (most frequent first). One
    64-bit mask of taken colours per row: O(nnz).
    """
    taken = np.zeros(n_rows, dtype=np.uint64)
    out = np.full(col_of.shape[0], SERIAL, dtype=np.int32)
    one = np.uint64(1)
    for i in order:
        j = col_of[i]
        used = np.uint64(0)
        for k in range(colptr[j], colptr[j + 1]):
            used |= taken[rows[k]]
        if used == ~np.uint64(0):
            continue
        c = 0
        while used & (one << np.uint64(c)):
            c += 1
        out[i] = c
        bit = one << np.uint64(c)
        for k in range(colptr[j], colptr[j + 1]):
            taken[rows[k]] |= bit
    return out


# --- sweeps: serial kernels over a range of features or rows, run on threads (nogil) ---

@njit(cache=True, nogil=True, error_model="numpy")
def linear_part(csc, group, w, mu, lam, alpha, e, draw, key, order, lo, hi):
    """Update w_i (h = x_i) for i in order[lo:hi]; returns the number of non-finite draws."""
    colptr, rows, values, col_of = csc
    has_values = values.shape[0] > 0
    bad = 0
    for idx in range(lo, hi):
        i = order[idx]
        j = col_of[i]
        hh = 0.0
        eh = 0.0
        for k in range(colptr[j], colptr[j + 1]):
            x = np.float64(values[k]) if has_values else 1.0
            hh += x * x
            eh += e[rows[k]] * x
        old = np.float64(w[i])
        g = group[i]
        new32 = np.float32(_draw(old, hh, eh, alpha, mu[g], lam[g], draw, key, i, 0.0, 0.0, 0.0))
        if not np.isfinite(new32):
            bad += 1
            continue
        d = np.float64(new32) - old
        w[i] = new32
        for k in range(colptr[j], colptr[j + 1]):
            x = np.float64(values[k]) if has_values else 1.0
            e[rows[k]] -= x * d
    return bad


@njit(cache=True, nogil=True, error_model="numpy")
def block_sums(csr, V, offset, width, f0, nb, size, size_next, S, T, lo, hi):
    """For rows lo..hi-1: S[r, b] = Sum_{i in F_l} v_{i, f0+b} x_i, T the same over F_{l+1}.

    F_l = internal ids below ``size`` (F_{l+1}: below ``size_next``; 0: no T).
    Columns nb..BLOCK-1 are 0, so the block loops can run over all BLOCK.
    """
    indptr, indices, values = csr
    has_values = values.shape[0] > 0
    for r in range(lo, hi):
        for b in range(BLOCK):
            S[r, b] = 0.0
        if size_next:
            for b in range(BLOCK):
                T[r, b] = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            i = indices[k]
            if i >= size:
                continue
            x = np.float64(values[k]) if has_values else 1.0
            base = np.uint64(offset) + np.uint64(i) * np.uint64(width) + np.uint64(f0)
            for b in range(nb):
                S[r, b] += V[base + np.uint64(b)] * x
            if i < size_next:
                for b in range(nb):
                    T[r, b] += V[base + np.uint64(b)] * x


@njit(cache=True, error_model="numpy", inline="always")
def coordinate_h(x, s, t, v, dep):
    """h of one row: x (S - T) for a dependent coordinate, x (S - v x) otherwise (module notes)."""
    return x * (s - t) if dep else x * (s - v * x)


@njit(cache=True, error_model="numpy", inline="always")
def _draw(old, hh, eh, alpha, prior_mu, prior_lam, draw, key, counter, dd=0.0, ed=0.0, cd=0.0):
    """The conditional's mean (ALS) or a draw from it (MCMC); ``old`` when its precision is 0.

    hh = Sum h^2, eh = Sum e h; dd = Sum h_d^2, ed = Sum R h_d of the distillation term, weight cd.
    """
    p = alpha * (hh + cd * dd) + prior_lam
    if not p > 0.0:
        return old
    new = (alpha * (eh + old * hh + cd * (ed + old * dd)) + prior_lam * prior_mu) / p
    if draw:
        new += normal(key, counter) / math.sqrt(p)
    return new


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz", "arcp"})
def factor_part(csc, layout, group, dep_row, mu, lam, alpha, e, S, T, R, cd, draw, key, l, f0, cstart, order, lo,
                hi, buffers):
    """Update coordinates f0..f0+BLOCK-1 (within level l's width) of v_i^(l) for i in order[lo:hi].

    The prior of coordinate f of a feature in group g is mu[g, cstart + f],
    lam[g, cstart + f]; a RaFM dependent vector's (l < k_i) is row g + dep_row
    (0: its group's row; see :func:`group_moments`). S and T hold the block's
    row sums (:func:`block_sums`).
    RaFM with cd > 0: R[r, l] is row r's distillation residual R_l (module notes).

    A feature with at most ``H.shape[1]`` rows (``buffers`` = (H, E, D, W, Hd,
    Ed), this thread's) is gathered once: H[b, k] = h_b of its k-th row, E[k]
    = e of that row (Hd, Ed: h_d and R_l). Its coordinates then move one by one on contiguous memory
    (the h_b do not change while they do) and one more pass writes e, S and
    T back. Larger features take two passes over their rows per coordinate.
    Returns the number of non-finite draws (those coordinates keep their value).
    """
    colptr, rows, values, col_of = csc
    widths, offsets, sizes, nested, V = layout
    H, E, D, W, Hd, Ed = buffers
    has_values = values.shape[0] > 0
    m = widths.shape[0]
    width = widths[l]
    nb = min(BLOCK, width - f0)
    size_next = sizes[l + 1] if nested and l + 1 < m else 0
    distil = cd > 0.0 and size_next > 0   # level l has students
    teach = cd > 0.0 and nested and l > 0  # level l teaches level l - 1
    bad = 0
    for idx in range(lo, hi):
        i = order[idx]
        dep = i < size_next
        g = group[i] + dep_row if dep else group[i]
        base = np.uint64(offsets[l]) + np.uint64(i) * np.uint64(width) + np.uint64(f0)
        j = col_of[i]
        a, z = colptr[j], colptr[j + 1]
        n = z - a
        if n <= H.shape[1]:
            for b in range(nb):
                W[b] = np.float64(V[base + np.uint64(b)])
            if dep:
                for k in range(n):
                    r = rows[a + k]
                    x = np.float64(values[a + k]) if has_values else 1.0
                    E[k] = e[r]
                    for b in range(nb):
                        H[b, k] = x * (S[r, b] - T[r, b])
                if distil:
                    for k in range(n):
                        r = rows[a + k]
                        x = np.float64(values[a + k]) if has_values else 1.0
                        Ed[k] = R[r, l]
                        for b in range(nb):
                            Hd[b, k] = x * (T[r, b] - W[b] * x)
            else:
                for k in range(n):
                    r = rows[a + k]
                    x = np.float64(values[a + k]) if has_values else 1.0
                    E[k] = e[r]
                    for b in range(nb):
                        H[b, k] = x * (S[r, b] - W[b] * x)
            for b in range(nb):
                hh = 0.0
                eh = 0.0
                for k in range(n):
                    hh += H[b, k] * H[b, k]
                    eh += E[k] * H[b, k]
                dd = 0.0
                ed = 0.0
                if dep and distil:
                    for k in range(n):
                        dd += Hd[b, k] * Hd[b, k]
                        ed += Ed[k] * Hd[b, k]
                old = W[b]
                new32 = np.float32(_draw(old, hh, eh, alpha, mu[g, cstart + f0 + b], lam[g, cstart + f0 + b],
                                         draw, key, base + np.uint64(b), dd, ed, cd))
                D[b] = 0.0
                if not np.isfinite(new32):
                    bad += 1
                    continue
                D[b] = np.float64(new32) - old
                V[base + np.uint64(b)] = new32
                if D[b] != 0.0:
                    for k in range(n):
                        E[k] -= H[b, k] * D[b]
                    if dep and distil:
                        for k in range(n):
                            Ed[k] -= Hd[b, k] * D[b]
            for k in range(n):
                r = rows[a + k]
                x = np.float64(values[a + k]) if has_values else 1.0
                e[r] = E[k]
                if teach:
                    moved = 0.0
                    for b in range(nb):
                        moved += x * (S[r, b] - W[b] * x) * D[b]
                    R[r, l - 1] += moved
                for b in range(nb):
                    S[r, b] += x * D[b]
                if dep:
                    if distil:
                        R[r, l] = Ed[k]
                    for b in range(nb):
                        T[r, b] += x * D[b]
            continue
        for b in range(nb):
            old = np.float64(V[base + np.uint64(b)])
            hh = 0.0
            eh = 0.0
            dd = 0.0
            ed = 0.0
            for k in range(a, z):
                r = rows[k]
                x = np.float64(values[k]) if has_values else 1.0
                h = coordinate_h(x, S[r, b], T[r, b], old, dep)
                hh += h * h
                eh += e[r] * h
                if dep and distil:
                    hd = x * (T[r, b] - old * x)
                    dd += hd * hd
                    ed += R[r, l] * hd
            new32 = np.float32(_draw(old, hh, eh, alpha, mu[g, cstart + f0 + b], lam[g, cstart + f0 + b],
                                     draw, key, base + np.uint64(b), dd, ed, cd))
            if not np.isfinite(new32):
                bad += 1
                continue
            d = np.float64(new32) - old
            V[base + np.uint64(b)] = new32
            if d == 0.0:
                continue
            for k in range(a, z):
                r = rows[k]
                x = np.float64(values[k]) if has_values else 1.0
                e[r] -= coordinate_h(x, S[r, b], T[r, b], old, dep) * d
                if teach:
                    R[r, l - 1] += x * (S[r, b] - old * x) * d
                if dep and distil:
                    R[r, l] -= x * (T[r, b] - old * x) * d
                S[r, b] += x * d
                if dep:
                    T[r, b] += x * d
    return bad


@njit(cache=True, nogil=True, error_model="numpy")
def distillation_residuals(csr, widths, offsets, sizes, V, R, lo, hi):
    """R[r, l] = A_{l+1,l+1} - A_{l,l+1} of rows r in lo..hi-1 (RaFM; module notes): the pairs of
    F_{l+1} features at level l+1 minus the same pairs at level l."""
    indptr, indices, values = csr
    has_values = values.shape[0] > 0
    for r in range(lo, hi):
        for l in range(widths.shape[0] - 1):
            gap = 0.0
            for level, sign in ((l + 1, 1.0), (l, -1.0)):
                width = widths[level]
                for f in range(width):
                    s = 0.0
                    q = 0.0
                    for k in range(indptr[r], indptr[r + 1]):
                        i = indices[k]
                        if i >= sizes[l + 1]:
                            continue
                        x = np.float64(values[k]) if has_values else 1.0
                        v = np.float64(V[offsets[level] + i * width + f]) * x
                        s += v
                        q += v * v
                    gap += sign * 0.5 * (s * s - q)
            R[r, l] = gap


@njit(cache=True)
def group_moments(V, widths, offsets, sizes, group, n_groups, nested, dep_row):
    """Per prior row and coordinate: (count, Sum v, Sum v^2) over the features of each level.

    Coordinates are numbered level after level (level l from sum(widths[:l]));
    a vector v_i^(l) counts in row group[i], or in row group[i] + ``dep_row`` when
    ``dep_row`` > 0 and it is a RaFM dependent vector (``nested``, i in F_{l+1}):
    n_groups + dep_row rows in all.
    """
    m = widths.shape[0]
    n_coords = 0
    for l in range(m):
        n_coords += widths[l]
    count = np.zeros((n_groups + dep_row, n_coords))
    total = np.zeros((n_groups + dep_row, n_coords))
    square = np.zeros((n_groups + dep_row, n_coords))
    cstart = 0
    for l in range(m):
        width = widths[l]
        size_next = sizes[l + 1] if nested and l + 1 < m else 0
        for i in range(sizes[l]):
            g = group[i] + dep_row if i < size_next else group[i]
            base = offsets[l] + i * width
            for f in range(width):
                v = np.float64(V[base + f])
                count[g, cstart + f] += 1.0
                total[g, cstart + f] += v
                square[g, cstart + f] += v * v
        cstart += width
    return count, total, square
