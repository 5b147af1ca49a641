"""`rafm predict`: apply a saved model to files, predictions in input order."""

import click

from rafmcli.cli.options import INPUT, OUTPUT, no_cache_option, read, warn_unseen


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
@click.option("--quiet", is_flag=True, help="No progress bar and no warnings on stderr.")
@click.argument("files", nargs=-1, required=True, type=INPUT)
@no_cache_option
def predict(model_path, out, raw, metrics, quiet, files, no_cache):
    """Predict every row of FILE... with a saved model.

    Writes probabilities (classification) or values clipped to the training
    targets' range (regression), one a line, files in the order given.
    Features the model never saw contribute nothing.
    """
    import numpy as np

    from rafmcli.io.output import Outputs, format_predictions
    from rafmcli.metrics import evaluate
    from rafmcli.model import files as model_files
    from rafmcli.predict import predict_dataset

    model = model_files.load(model_path)
    datasets = [read(f, no_cache, quiet) for f in files]
    parts, scored = [], []
    for name, data in zip(files, datasets):
        result = predict_dataset(model, data)  # an MCMC model: the mean of its draws' predictions
        if not quiet:
            warn_unseen(name, result.unseen, result.unseen_distinct)
        finished = result.values
        parts.append(predict_dataset(model, data, raw=True).values if raw else finished)
        scored.append((name, data.labels, finished))
    with Outputs() as outputs:
        outputs.write(out, lambda fh: format_predictions(fh, np.concatenate(parts)))
    if metrics:
        if len(scored) > 1:
            scored.append(("all files", np.concatenate([s[1] for s in scored]),
                           np.concatenate([s[2] for s in scored])))
        for name, labels, finished in scored:
            shown = " ".join(f"{k} {v:.6g}" for k, v in evaluate(model.task, labels, finished).items())
            click.echo(f"rafm: {name}: {shown} ({labels.shape[0]:,} rows)", err=True)
