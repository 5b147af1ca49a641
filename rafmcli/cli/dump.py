"""`rafm dump`: a model file as text (libFM's layout) or JSON."""

import click

from rafmcli.cli.options import OUTPUT, distinct_files


@click.command()
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Model file written by rafm train --save-model.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: libFM's layout (one line per feature id), extended per level for RaFM and "
                   "DiFacto; json: one object with a list of features. An MCMC model's K > 1 samples: K "
                   "blocks (text) or a list of draws (json).")
@click.option("--out", type=OUTPUT, default="-", show_default=True, help="Where to write; - for stdout.")
def dump(model_path, fmt, out):
    """Print a model's parameters: bias, linear weights and factors (of every sample of an MCMC model).

    The layout and the formula that scores a row from it are in
    rafm-files(5); `libFM -load_model` reads the text of an FM.
    """
    from rafmcli.io.output import text_output
    from rafmcli.model import dump as model_dump
    from rafmcli.model import files as model_files

    distinct_files({"--model": model_path}, {"--out": out})
    model = model_files.load(model_path)
    if fmt == "text":
        model_dump.check_dense(model, model_path)
    with text_output(out, encoding="ascii") as fh:
        (model_dump.write_text if fmt == "text" else model_dump.write_json)(model, fh)
