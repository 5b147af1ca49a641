"""`rafm predict`: apply a saved model to files, predictions in input order."""

import click

from rafmcli.cli.options import (
    INPUT,
    OUTPUT,
    TOP_K,
    arguments,
    distinct_files,
    no_cache_option,
    ranged,
    read,
    warn_unseen,
)
from rafmcli.errors import printable
from rafmcli.options import DEFAULTS as D


@click.command()
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Model file written by rafm train --save-model.")
@click.option("--out", type=OUTPUT, default="-", show_default=True,
              help="Prediction file, one value a line in input order; - for stdout.")
@click.option("--raw", is_flag=True,
              help="Write margins y(x) (log-odds for classification, unclipped values for regression) "
                   "instead of probabilities or clipped values.")
@click.option("--metrics", is_flag=True,
              help="Print the metrics of each labelled FILE on stderr: RMSE and MAE (regression), "
                   "logloss, AUC and accuracy (classification).")
@click.option("--eval-group", type=ranged("eval_group"),
              help="Implicit models, with --metrics: also rank each row's value of this group among all its "
                   "values (HR@K, NDCG@K, full and with 100 sampled).")
@click.option("--top-k", "-k", type=TOP_K, default=D.top_k, show_default=True,
              help="Implicit models: the K of HR@K and NDCG@K.")
@click.option("--exclude-seen", type=INPUT,
              help="Implicit models: leave out of the ranking the values a row's context holds in this "
                   "training file.")
@click.option("--quiet", is_flag=True, help="No progress bar and no warnings on stderr.")
@click.argument("files", nargs=-1, required=True, type=INPUT)
@no_cache_option
def predict(model_path, out, raw, metrics, eval_group, top_k, exclude_seen, quiet, files, no_cache):
    """Predict every row of FILE... with a saved model.

    Writes probabilities (classification), values clipped to the training
    targets' range (regression) or raw scores (implicit models), one a line,
    files in the order given. Features the model never saw contribute nothing.
    """
    import numpy as np

    from rafmcli import jit
    from rafmcli.io.output import Outputs, format_predictions
    from rafmcli.metrics import evaluate
    from rafmcli.model import files as model_files
    from rafmcli.predict import KERNEL_MODULES, predict_dataset

    distinct_files({"--model": model_path, "--exclude-seen": exclude_seen, **arguments("FILE", files)}, {"--out": out})
    kernels_loaded = jit.preload(*KERNEL_MODULES)  # while the model and the inputs are checked
    model = model_files.load(model_path, mapped=True)
    implicit = model.task == "implicit"
    if (eval_group is not None or exclude_seen) and not (implicit and metrics):
        raise click.UsageError("--eval-group and --exclude-seen need --metrics and an implicit model")
    if eval_group is not None:
        from rafmcli.cli.options import check_group

        check_group(model, model_path, eval_group)
    seen = read(exclude_seen, no_cache, quiet) if exclude_seen else None
    datasets = [read(f, no_cache, quiet) for f in files]
    if implicit and metrics:  # ranked as positives, as training reads them
        from rafmcli.io.reader import require_positive_labels

        for name, data in zip(files, datasets):
            require_positive_labels(name, data)
    kernels_loaded()
    parts, scored = [], []
    for name, data in zip(files, datasets):
        result = predict_dataset(model, data)  # an MCMC model: the mean of its draws' predictions
        if not quiet:
            warn_unseen(name, result.unseen, result.unseen_distinct)
        finished = result.values
        parts.append(predict_dataset(model, data, raw=True).values if raw else finished)
        scored.append((name, data.labels, finished))
    reports = []  # computed before the outputs are committed: after that, signals are ignored
    if metrics:
        if len(scored) > 1:
            scored.append(("all files", np.concatenate([s[1] for s in scored]),
                           np.concatenate([s[2] for s in scored])))
        if implicit:
            scored = _implicit_metrics(model, files, datasets, eval_group, top_k, seen)
        for name, labels, finished in scored:
            values = finished if implicit else evaluate(model.task, labels, finished)
            shown = " ".join(f"{k} {v:.6g}" for k, v in values.items())
            reports.append(f"rafm: {printable(name)}: {shown} ({labels.shape[0]:,} rows)")
    with Outputs() as outputs:
        outputs.write(out, lambda fh: format_predictions(fh, parts[0] if len(parts) == 1 else np.concatenate(parts)),
                      binary=True)
    for report in reports:
        click.echo(report, err=True)


def _implicit_metrics(model, files, datasets, group, k, seen):
    """(name, labels, metrics) per file and for all files: ranking.evaluate on its rows."""
    import numpy as np

    from rafmcli import ranking
    from rafmcli.predict import kernel_rows

    seen_values = model.vocabulary.lookup(kernel_rows(model, seen)) if seen is not None else None
    parts = [(name, data.labels, kernel_rows(model, data)[:3]) for name, data in zip(files, datasets)]
    if len(parts) > 1:
        parts.append(("all files", np.concatenate([p[1] for p in parts]), _stacked([p[2] for p in parts])))
    return [(name, labels, ranking.evaluate(model, rows, group, k, seen_values)) for name, labels, rows in parts]


def _stacked(rows):
    """One CSR of several (indptr, indices, values) in ``kernel_rows`` form."""
    import numpy as np

    starts = np.cumsum([0] + [r[0][-1] for r in rows])
    indptr = np.concatenate([[0]] + [r[0][1:] + s for r, s in zip(rows, starts)])
    ones = all(r[2].shape[0] == 0 for r in rows)
    values = np.concatenate([r[2] if r[2].shape[0] or ones else np.ones(r[1].shape[0], np.float32)
                             for r in rows])
    return indptr, np.concatenate([r[1] for r in rows]), values
