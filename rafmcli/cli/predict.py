"""`rafm predict`: apply a saved model to files, predictions in input order."""

import click

from rafmcli.cli.options import INPUT, OUTPUT, no_cache_option, read, warn_unseen


@click.command()
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Model file written by rafm train --save-model.")
@click.option("--out", type=OUTPUT, default="-", show_default=True,
              help="Prediction file, one value a line in input order; - for stdout.")
@click.option("--quiet", is_flag=True, help="No progress bar and no warnings on stderr.")
@click.argument("files", nargs=-1, required=True, type=INPUT)
@no_cache_option
def predict(model_path, out, quiet, files, no_cache):
    """Predict every row of FILE... with a saved model.

    Writes probabilities (classification) or values clipped to the training
    targets' range (regression), one a line, files in the order given.
    Features the model never saw contribute nothing.
    """
    import numpy as np

    from rafmcli.io.output import write_predictions
    from rafmcli.model import files as model_files
    from rafmcli.predict import predict_dataset

    model = model_files.load(model_path)
    datasets = [read(f, no_cache, quiet) for f in files]
    parts = []
    for name, data in zip(files, datasets):
        predictions, unseen, distinct = predict_dataset(model, data)
        if not quiet:
            warn_unseen(name, unseen, distinct)
        parts.append(predictions)
    write_predictions(out, np.concatenate(parts))
