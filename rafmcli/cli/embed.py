"""`rafm embed`: feature embeddings in word2vec text format."""

import click

from rafmcli.cli.options import MODEL, OUTPUT, check_group, load_model


@click.command()
@click.option("--model", "model_path", type=MODEL, required=True, help="Model file written by rafm train.")
@click.option("--level", type=click.IntRange(1), default=1, show_default=True,
              help="RaFM and DiFacto: the level whose vectors to write (1: every feature, rank D_1).")
@click.option("--group", type=click.IntRange(0),
              help="Only the features of this group (models trained with groups: --meta or libFFM fields).")
@click.option("--out", type=OUTPUT, required=True, help="Where to write the vectors; - for stdout.")
def embed(model_path, level, group, out):
    """Write feature embeddings in word2vec's text format: a line `count dim`,
    then `id v1 ... vD` per feature.

    FM: each feature's vector. RaFM: v_i^(N) of level N for the features that
    have it (k_i >= N); level 1, the default, holds every feature and is the
    level every pair of features interacts through, so its vectors are
    comparable. DiFacto: the first D_N coordinates of the features with
    k_i >= N.
    """
    from rafmcli.embeddings import embeddings, write_word2vec
    from rafmcli.errors import InputError
    from rafmcli.io.output import Outputs

    model = load_model(model_path, groups=group is not None)
    if group is not None:
        check_group(model, model_path, group)
    try:
        emb = embeddings(model, level, group)
    except ValueError as exc:
        raise InputError(f"{model_path}: {exc}") from None
    with Outputs() as outputs:
        outputs.write(out, lambda fh: write_word2vec(fh, emb))
