"""`rafm recommend`: the best values of one feature group for each context row."""

import click

from rafmcli.cli.options import (
    INPUT,
    MODEL,
    OUTPUT,
    TOP_K,
    arguments,
    check_group,
    distinct_files,
    load_model,
    no_cache_option,
    read,
)
from rafmcli.options import DEFAULTS as D


@click.command()
@click.option("--model", "model_path", type=MODEL, required=True,
              help="Model file written by rafm train --task implicit --save-model.")
@click.option("--group", type=click.IntRange(0), required=True,
              help="The group whose values to recommend (a group of the --meta file or a libFFM field).")
@click.option("--top-k", "-k", type=TOP_K, default=D.top_k, show_default=True,
              help="Recommendations per row.")
@click.option("--exclude-seen", type=INPUT,
              help="Training file: leave out the values a row's context (its other groups) holds there.")
@click.option("--out", type=OUTPUT, default="-", show_default=True,
              help="Where to write the table; - for stdout.")
@click.option("--quiet", is_flag=True, help="No progress bar on stderr.")
@click.argument("files", nargs=-1, required=True, type=INPUT)
@no_cache_option
def recommend(model_path, group, top_k, exclude_seen, out, quiet, files, no_cache):
    """For each row of FILE..., score every value of GROUP seen in training
    substituted for the row's own, and write the best k.

    Output: tab-separated, a header line, then `row rank id score` per
    recommendation: the row's number (from 1, over all files), the rank (from
    1), the value's feature id (ids, ascending, joined by commas when a
    value holds several features) and its score.
    """
    import numpy as np

    from rafmcli import ranking
    from rafmcli.embeddings import value_names
    from rafmcli.io.output import Outputs
    from rafmcli.predict import kernel_rows

    distinct_files({"--model": model_path, "--exclude-seen": exclude_seen, **arguments("FILE", files)}, {"--out": out})
    model = load_model(model_path, groups=True)
    check_group(model, model_path, group)
    train_values = None
    if exclude_seen:
        train_values = model.vocabulary.lookup(kernel_rows(model, read(exclude_seen, no_cache, quiet)))
    ids, scores = [], []
    for name in files:
        ctx = ranking.contexts(model.vocabulary, kernel_rows(model, read(name, no_cache, quiet)), group,
                               train_values)
        part_ids, part_scores = ranking.recommend(model, ctx, top_k)
        ids.append(part_ids)
        scores.append(part_scores)
    ids, scores = np.concatenate(ids), np.concatenate(scores)
    labels = value_names(model, np.unique(ids[ids >= 0]))
    with Outputs() as outputs:
        outputs.write(out, lambda fh: _write_table(fh, ids, scores, labels))


def _write_table(fh, ids, scores, labels):
    fh.write("row\trank\tid\tscore\n")
    for r in range(ids.shape[0]):
        for rank in range(ids.shape[1]):
            if ids[r, rank] < 0:
                break
            fh.write(f"{r + 1}\t{rank + 1}\t{labels[int(ids[r, rank])]}\t{scores[r, rank]:.6g}\n")
