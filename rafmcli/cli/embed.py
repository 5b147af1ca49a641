"""`rafm embed`: feature embeddings in word2vec text format."""

import click

from rafmcli.cli.options import LEVEL, MODEL, OUTPUT, check_group, distinct_files, load_model
from rafmcli.options import EMBED_LEVEL


@click.command()
@click.option("--model", "model_path", type=MODEL, required=True, help="Model file written by rafm train.")
@click.option("--level", type=LEVEL, default=EMBED_LEVEL, show_default=True,
              help="RaFM and DiFacto: the level whose vectors to write, or all: every level's side by side "
                   "(zeros where a feature has none).")
@click.option("--group", type=click.IntRange(0),
              help="The values of this group, each the sum of its features' vectors (models trained with "
                   "groups: --meta or libFFM fields).")
@click.option("--out", type=OUTPUT, required=True, help="Where to write the vectors; - for stdout.")
def embed(model_path, level, group, out):
    """Write feature embeddings in word2vec's text format: a line `count dim`,
    then `id v1 ... vD` per feature.

    FM: each feature's vector. RaFM, by default: each feature's vectors of
    every level side by side (rank D_1 + ... + D_m, zeros above its own level
    k_i), so every feature has one and rare and frequent features are
    comparable; --level N: v_i^(N) of the features with k_i >= N. DiFacto:
    its vector zero-padded to D_m, or with --level N the first D_N
    coordinates of the features with k_i >= N.
    """
    distinct_files({"--model": model_path}, {"--out": out})
    from rafmcli.embeddings import embeddings, value_embeddings, write_word2vec
    from rafmcli.errors import InputError
    from rafmcli.io.output import Outputs

    model = load_model(model_path, groups=group is not None)
    if group is not None:
        check_group(model, model_path, group)
    try:
        emb = embeddings(model, level) if group is None else value_embeddings(model, level, group)
    except ValueError as exc:
        raise InputError(f"{model_path}: {exc}") from None
    with Outputs() as outputs:
        outputs.write(out, lambda fh: write_word2vec(fh, emb))
