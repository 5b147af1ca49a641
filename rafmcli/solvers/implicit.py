"""Implicit training (positives only, Feat2Vec negatives): epochs, validation, early stopping.

The kernels (:mod:`rafmcli.kernels.implicit`) run whole epochs; this module
builds the group values and noise tables, draws the validation negatives once,
and owns the row order, the random streams, the ``--rlog`` file and the
decision to stop, as :mod:`rafmcli.solvers.sgd` does for explicit data.
"""

import math
import time
from dataclasses import asdict

import numpy as np

from rafmcli import ranking
from rafmcli.errors import DivergedError, InputError
from rafmcli.kernels import implicit as K
from rafmcli.model.layout import aligned_copy, build
from rafmcli.model.vocabulary import build_vocabulary, noise_tables, rng_streams
from rafmcli.options import per_level
from rafmcli.predict import kernel_rows
from rafmcli.solvers.sgd import METHODS, VARIANTS, Log, feature_levels, hyper_vector, optimizer_state

LOSSES = ranking.LOSSES
REDRAWS = 20  # --reject-positives: a negative that is a training row is drawn again up to this often


def metric_names(opts, ranked):
    names = ("loss", "auc")
    return names + ranking.ranking_names(opts.top_k) if ranked else names


def watched(opts, ranked):
    """(metric, sign): early stopping minimises sign * metric."""
    return (f"ndcg{opts.top_k}", -1.0) if ranked else ("loss", 1.0)


def train(data, groups, opts, validation=None, levels_override=None, rlog=None, quiet=False,
          progress=True, echo=print):
    """Train on positive rows ``data`` with feature ``groups`` (io.groups.Groups);
    returns (model, history of per-epoch dicts). ``rlog``: a text file for the
    per-epoch table, or None.

    With ``validation`` (positives), keeps the best epoch by validation NDCG@k
    of ``opts.eval_group`` (or, without one, by the validation loss) and stops
    after ``opts.early_stop`` epochs without improvement.
    """
    rng = np.random.default_rng(opts.seed)
    levels = feature_levels(data, opts.ranks, levels_override)
    model = build(opts.model, "implicit", opts.ranks, data.feature_ids, levels, opts.init_stdev, rng, 0.0,
                  (0.0, 0.0))
    assigned = groups.assign(model.feature_ids)
    rows = kernel_rows(model, data)
    vocab, row_values = build_vocabulary(rows, assigned.group, assigned.n_groups)
    model.vocabulary = vocab
    if opts.eval_group is not None:
        lo, hi = vocab.candidates(opts.eval_group) if opts.eval_group < vocab.n_groups else (0, 0)
        if hi <= lo:
            raise InputError(f"group {opts.eval_group} has no features in the training data")
    try:
        noise = noise_tables(vocab, opts.alpha1, opts.alpha2, opts.negative_groups,
                             row_values if opts.reject_positives else None)
    except ValueError as exc:
        raise InputError(f"{data.path}: {exc}") from None
    sampled = rset = None
    if validation is not None:
        vrows = kernel_rows(model, validation)
        sampled = ranking.fixed_negatives(vocab, noise, vrows, opts.negatives, REDRAWS, opts.seed + 1)
        if opts.eval_group is not None:
            rset = ranking.ranking_set(vocab, vrows, opts.eval_group, row_values, opts.seed + 2)
    state = optimizer_state(opts.method, model)
    hyper = hyper_vector(opts, model)
    reg_v = np.asarray(per_level(opts.reg_factors, len(opts.ranks)), dtype=np.float64)
    conf = np.zeros(K.N_CONF, dtype=np.int64)
    conf[K.C_NEGATIVES], conf[K.C_LOSS], conf[K.C_NCE] = opts.negatives, LOSSES[opts.loss], opts.nce
    conf[K.C_NESTED], conf[K.C_VARIANT] = model.nested, VARIANTS[opts.variant]
    conf[K.C_TRIES] = REDRAWS if opts.reject_positives else 0
    kmodel = model.kernel_model()
    vocab_k = (vocab.ptr, vocab.feat, vocab.x)
    watch, sign = watched(opts, rset is not None)
    best = (math.inf, 0, None)
    history = []
    log = Log(rlog, "implicit", metric_names(opts, rset is not None))
    bar = None
    if progress and not quiet:
        from tqdm import tqdm

        bar = tqdm(total=opts.iters, unit="epoch", leave=False, desc=f"{opts.model} implicit",
                   disable=None)
    n = data.n_rows
    try:
        for epoch in range(1, opts.iters + 1):
            start = time.perf_counter()
            order = rng.permutation(n).astype(np.int64)
            streams = rng_streams((opts.seed, epoch), opts.threads)
            args = ((epoch - 1) * n, row_values, vocab_k, noise.kernel_tuple(), kmodel, state, hyper, reg_v,
                    conf, streams, METHODS[opts.method])
            if opts.threads > 1:
                loss = K.train_epoch_hogwild(order, opts.threads, *args)
            else:
                loss = K.train_epoch(order, *args)
            train_loss = loss / max(n, 1)
            model.w0 = float(kmodel[5][0])
            row = {"epoch": epoch, "seconds": time.perf_counter() - start, "train_loss": train_loss}
            if sampled is not None:
                row.update(ranking.sampled_metrics(model, sampled, LOSSES[opts.loss], opts.nce))
            if rset is not None:
                row.update(ranking.ranking_metrics(model, rset, opts.top_k))
            if not math.isfinite(train_loss) or (sampled is not None and not math.isfinite(row["loss"])):
                raise DivergedError(
                    f"training diverged in epoch {epoch} (train loss {train_loss}); "
                    f"try a smaller --learn-rate (now {opts.learn_rate:g})")
            history.append(row)
            log.write(row)
            if bar is not None:
                shown = {"loss": f"{train_loss:.4f}"}
                if sampled is not None:
                    shown[f"val_{watch}"] = f"{row[watch]:.4f}"
                bar.set_postfix(shown, refresh=False)
                bar.update(1)
            if sampled is None:
                continue
            if sign * row[watch] < best[0]:
                best = (sign * row[watch], epoch, (model.w0, model.w.copy(), aligned_copy(model.V)))
            elif opts.early_stop and epoch - best[1] >= opts.early_stop:
                break
    finally:
        if bar is not None:
            bar.close()
    if best[2] is not None:
        model.w0, model.w, model.V = best[2]
    steady = [h["seconds"] for h in history[1:]] or [h["seconds"] for h in history]  # epoch 1 compiles
    summary = {"epochs": len(history), "best_epoch": best[1] or len(history),
               "positives_per_second": n / max(float(np.median(steady)), 1e-9)}
    if best[2] is not None:
        names = metric_names(opts, rset is not None)
        summary["validation"] = {k: history[best[1] - 1][k] for k in names}
    model.info = {"options": asdict(opts), "training": summary}
    if not quiet:
        echo(_summary_line(opts, model, history, summary))
    return model, history


def _summary_line(opts, model, history, summary):
    text = (f"{opts.model} implicit: {model.n_params:,} parameters, {summary['epochs']} epochs, "
            f"{sum(h['seconds'] for h in history):.2f}s ({summary['positives_per_second']:,.0f} positives/s "
            f"with {opts.negatives} negatives each)")
    if "validation" in summary:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in summary["validation"].items())
        text += f"; best epoch {summary['best_epoch']}: validation {shown}"
    return text
