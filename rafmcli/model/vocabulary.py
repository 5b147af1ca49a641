"""Group values of implicit data: the noise distribution and the candidates of recommend.

A *group value* is what a row holds in one feature group: its features of
that group with their values (one feature in a one-hot group; an item's
genres in a multi-feature group; nothing when the row lacks the group). The
vocabulary numbers the distinct values seen in training, contiguously per
group, and counts the rows holding each. It is saved with an implicit model:
negatives are drawn from it (Q2) and ``rafm recommend`` ranks its values.
"""

from dataclasses import dataclass, fields

import numpy as np

from rafmcli.kernels import read_only


@dataclass
class Vocabulary:
    """Distinct group values; ids are in internal feature numbering (model.layout)."""

    group_of: np.ndarray   # int32 [F]: group of internal feature j
    group_ptr: np.ndarray  # int64 [G+1]: group g's values are group_ptr[g] .. group_ptr[g+1]-1
    ptr: np.ndarray        # int64 [V+1]: value v's entries are ptr[v] .. ptr[v+1]-1 of feat, x
    feat: np.ndarray       # int32: internal feature ids, sorted within a value
    x: np.ndarray          # float32: their values
    count: np.ndarray      # int64 [V]: training rows holding value v

    def __post_init__(self):
        """Every array read-only, however the vocabulary was made (built, mapped from a model
        file, unpickled): numba compiles a kernel once per argument type (kernels.read_only)."""
        names = [f.name for f in fields(self)]
        for name, view in zip(names, read_only(*(getattr(self, name) for name in names))):
            setattr(self, name, view)

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def n_groups(self):
        return self.group_ptr.shape[0] - 1

    @property
    def n_values(self):
        return self.count.shape[0]

    def value_group(self):
        """Group of every value."""
        return np.repeat(np.arange(self.n_groups, dtype=np.int64), np.diff(self.group_ptr))

    def distinct_features(self):
        """c_g: features of each group seen in training (the complexity of step 1)."""
        return np.bincount(self.group_of, minlength=self.n_groups).astype(np.int64)

    def candidates(self, g):
        """(lo, hi): the values of group g other than its empty value."""
        lo, hi = int(self.group_ptr[g]), int(self.group_ptr[g + 1])
        if lo < hi and self.ptr[lo] == self.ptr[lo + 1]:
            lo += 1
        return lo, hi

    def lookup(self, rows):
        """Value ids [n, G] of rows in ``kernel_rows`` form; -1 for a value never seen."""
        from rafmcli.kernels.sampling import index_group_values, sort_rows_by_group

        feat, xs, parts = sort_rows_by_group(rows[0], rows[1], rows[2], self.group_of, self.n_groups)
        found = index_group_values(feat, xs.view(np.uint32), parts, self.ptr, self.feat,
                                   self.x.view(np.uint32), self.value_group(), False)
        return found[0]

    ARRAYS = ("group_of", "group_ptr", "value_ptr", "value_features", "value_x", "value_count")

    def arrays(self):
        """The arrays saved in a model file, by the names of ``ARRAYS``."""
        return dict(zip(self.ARRAYS, (self.group_of, self.group_ptr, self.ptr, self.feat, self.x, self.count)))

    @classmethod
    def from_arrays(cls, arrays):
        return cls(*(arrays[name] for name in cls.ARRAYS))


def build_vocabulary(rows, group_of, n_groups):
    """(Vocabulary, row_values [n, G]) of training rows in ``kernel_rows`` form.

    ``group_of[j]`` is the group of internal feature j.
    """
    from rafmcli.kernels.sampling import index_group_values, sort_rows_by_group

    group_of, = read_only(np.ascontiguousarray(group_of, dtype=np.int32))  # as Vocabulary's
    feat, xs, parts = sort_rows_by_group(rows[0], rows[1], rows[2], group_of, n_groups)
    none64, none32 = read_only(np.zeros(1, np.int64), np.zeros(0, np.int32))  # in place of Vocabulary's
    row_values, _, rep_row, rep_group, counts = index_group_values(
        feat, xs.view(np.uint32), parts, none64, none32, none32.view(np.uint32), np.zeros(0, np.int64), True)
    # values of a group contiguous: the empty value (a row without the group) first, then
    # the others as first seen, so that a group's candidates are one range (Vocabulary.candidates)
    lengths = parts[rep_row, rep_group + 1] - parts[rep_row, rep_group]
    order = np.lexsort((lengths > 0, rep_group))
    new_id = np.empty(order.shape[0], dtype=np.int32)
    new_id[order] = np.arange(order.shape[0], dtype=np.int32)
    row_values = new_id[row_values]
    rep_row, rep_group = rep_row[order], rep_group[order]
    starts = parts[rep_row, rep_group]
    lengths = parts[rep_row, rep_group + 1] - starts
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    take = np.repeat(starts - ptr[:-1], lengths) + np.arange(ptr[-1])
    group_ptr = np.searchsorted(rep_group, np.arange(n_groups + 1)).astype(np.int64)
    vocab = Vocabulary(group_of, group_ptr, ptr, feat[take], xs[take], counts[order])
    return vocab, row_values


@dataclass
class NoiseTables:
    """Alias tables of the two sampling steps and log Q2 of every value."""

    group_ptr: np.ndarray    # int64 [G+1], as in the vocabulary
    group_prob: np.ndarray   # float64 [G]: step 1, groups ~ c_g^alpha1 (0 for groups not sampled)
    group_alias: np.ndarray  # int64 [G]
    value_prob: np.ndarray   # float64 [V]: step 2, values ~ count^alpha2 within their group
    value_alias: np.ndarray  # int64 [V]
    logq: np.ndarray         # float64 [V]: log Q2(v)
    log_unseen: np.ndarray   # float64 [G]: log Q2 of a value seen once (for values never seen)
    group_p: np.ndarray      # float64 [G]: probability of step 1 choosing g
    table: np.ndarray        # uint64: hashes of the training rows (--reject-positives), or empty

    def kernel_tuple(self):
        return (self.group_ptr, self.group_prob, self.group_alias, self.value_prob, self.value_alias,
                self.logq, self.table)


def noise_tables(vocab, alpha1, alpha2, groups=None, row_values=None, floor=None):
    """Step 1 over ``groups`` (None: every group with features), step 2 within each.

    c_g is the number of distinct features of group g in training. With
    ``row_values``, the hash set of training rows is built for rejection.
    """
    from rafmcli.kernels.sampling import alias_tables, row_hash_table

    G = vocab.n_groups
    c = vocab.distinct_features().astype(np.float64)
    weight = np.where(c > 0, c ** alpha1, 0.0)
    if groups is not None:
        allowed = np.zeros(G, dtype=bool)
        allowed[[g for g in groups if g < G]] = True
        weight = np.where(allowed, weight, 0.0)
    weight = np.where(np.diff(vocab.group_ptr) > 0, weight, 0.0)
    if weight.sum() <= 0:
        raise ValueError("no feature group to draw negatives from")
    group_p = weight / weight.sum()
    if floor is not None:
        group_p = floored(group_p, *floor)
    g_prob, g_alias = np.empty(G), np.empty(G, dtype=np.int64)
    alias_tables(group_p, *read_only(np.array([0, G], dtype=np.int64)), g_prob, g_alias)  # as group_ptr
    smoothed = vocab.count.astype(np.float64) ** alpha2
    v_prob, v_alias = np.empty(vocab.n_values), np.empty(vocab.n_values, dtype=np.int64)
    alias_tables(smoothed, vocab.group_ptr, v_prob, v_alias)
    totals = np.bincount(vocab.value_group(), weights=smoothed, minlength=G)
    totals = np.where(totals > 0, totals, 1.0)
    logq = np.log(smoothed) - np.log(totals)[vocab.value_group()]
    table = row_hash_table(row_values) if row_values is not None else np.zeros(0, dtype=np.uint64)
    return NoiseTables(vocab.group_ptr, g_prob, g_alias, v_prob, v_alias, logq, -np.log(totals),
                       group_p, table)


def training_noise(vocab, options, row_values=None):
    """The noise tables of a run's options (an Options, or a model file's dict of them):
    --alpha1/--alpha2, --negative-groups and the --eval-share floor on --eval-group; with
    ``row_values``, the rejection table of --reject-positives."""
    get = options.get if isinstance(options, dict) else lambda name, default=None: getattr(options, name)
    groups, eval_group = get("negative_groups"), get("eval_group")
    floor = None if eval_group is None else (eval_group, get("eval_share", 0.0))  # older models: no floor
    return noise_tables(vocab, get("alpha1"), get("alpha2"), tuple(groups) if groups else None, row_values, floor)


def floored(group_p, g, share):
    """Step 1's probabilities with group ``g`` drawn at least ``share`` of the time, the
    other groups scaled down alike (still a convex combination: Theorem 1)."""
    if not 0 <= g < group_p.shape[0] or group_p[g] <= 0 or group_p[g] >= share:
        return group_p
    out = group_p * ((1.0 - share) / (1.0 - group_p[g]))
    out[g] = share
    return out


def rng_streams(seed, n):
    """``n`` independent non-zero xorshift64* states from ``seed``."""
    state = np.random.SeedSequence(seed).generate_state(n, dtype=np.uint64)
    return np.where(state == 0, np.uint64(0x9E3779B97F4A7C15), state).astype(np.uint64)
