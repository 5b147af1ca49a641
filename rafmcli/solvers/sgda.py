"""SGDA: SGD whose L2 weights are learnt on the validation rows (Rendle, WSDM 2012; libFM's -method sgda).

The epoch loop, validation and early stopping are :func:`rafmcli.solvers.sgd.train`'s;
this module holds the state an SGDA epoch needs and runs the kernel
(:mod:`rafmcli.kernels.sgda`). The regularisation starts at 0, as in libFM,
and adapts from the second epoch on: one step per training row, each on the
next validation row, per group (--meta) for the linear weights and per group,
level and factor coordinate for the factors.
"""

import numpy as np

from rafmcli.io.groups import single_group
from rafmcli.kernels import read_only


class AdaptiveStep:
    """Runs SGDA epochs on a model: loss gradients per parameter, L2 weights per class."""

    def __init__(self, model, train_rows, labels, valid_rows, valid_labels, groups, opts, order):
        """``train_rows``, ``valid_rows``: kernel_rows of the training and validation data;
        ``groups``: a GroupAssignment of the data's features (None: one group);
        ``order``: the model's internal feature i -> data column (layout.build's renumbering)."""
        self.model = model
        groups = groups if groups is not None else single_group(model.feature_ids.shape[0])
        self.group = np.ascontiguousarray(groups.group[order], dtype=np.int32)
        widths = model.widths
        self.coff = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        self.lam_w = np.zeros(groups.n_groups)
        self.lam_v = np.zeros((groups.n_groups, int(widths.sum())))
        self.grads = (np.zeros(model.w.shape[0], np.float32), np.zeros(model.V.shape[0], np.float32))
        self.train = (*train_rows[:3], *read_only(np.asarray(labels, dtype=np.float64)))
        self.valid = (*valid_rows[:3], np.asarray(valid_labels, dtype=np.float64))
        self.next_valid = 0
        self.hyper = (float(opts.learn_rate), 0.0 if opts.task == "r" else 1.0, float(model.target_min),
                      float(model.target_max), float(opts.bias), float(opts.linear))

    def epoch(self, order, number, w0):
        """Epoch ``number`` (1-based) over rows ``order``; ``w0`` is the model's [bias] array.

        Returns the summed training loss (square error or logloss)."""
        from rafmcli.kernels.sgda import sgda_epoch

        m = self.model
        layout = ((m.levels - 1).astype(np.int64), m.widths, m.offsets, self.coff, m.nested, m.V)
        loss, self.next_valid = sgda_epoch(order, self.train, self.valid, self.next_valid, layout, (m.w, w0),
                                           self.grads, self.group, self.lam_w, self.lam_v, self.hyper,
                                           number > 1)
        return loss

    def summary(self):
        """The learnt L2 weights: per group for the linear weights, per group and level (mean over
        the level's coordinates) for the factors."""
        m = self.model
        per_level = [self.lam_v[:, self.coff[l]:self.coff[l + 1]].mean(axis=1).tolist() for l in range(len(m.ranks))]
        return {"linear": self.lam_w.tolist(), "factors_by_level": per_level}
