"""`rafm similar`: the features nearest a feature by cosine of their embeddings."""

import click

from rafmcli.cli.options import MODEL, OUTPUT, TOP_K, check_group, load_model
from rafmcli.options import DEFAULTS as D


@click.command()
@click.option("--model", "model_path", type=MODEL, required=True, help="Model file written by rafm train.")
@click.option("--top-k", "-k", type=TOP_K, default=D.top_k, show_default=True, help="Neighbours per feature.")
@click.option("--level", type=click.IntRange(1), default=1, show_default=True,
              help="RaFM and DiFacto: the level whose vectors to compare (as rafm embed).")
@click.option("--group", type=click.IntRange(0),
              help="Search this group.  [default: each ID's own group if the model has groups, else all]")
@click.option("--all-groups", is_flag=True, help="Search every feature, whatever its group.")
@click.option("--out", type=OUTPUT, default="-", show_default=True, help="Where to write the table; - for stdout.")
@click.argument("ids", nargs=-1, required=True, type=click.IntRange(0))
def similar(model_path, top_k, level, group, all_groups, out, ids):
    """For each feature ID, the k features whose embeddings (those of rafm embed)
    have the highest cosine with its own.

    Output: tab-separated, a header line, then `query rank id cosine` per
    neighbour.
    """
    from rafmcli.embeddings import embeddings, most_similar
    from rafmcli.errors import InputError
    from rafmcli.io.output import Outputs

    if group is not None and all_groups:
        raise click.UsageError("give --group or --all-groups, not both")
    model = load_model(model_path, groups=group is not None)
    if group is not None:
        check_group(model, model_path, group)
    try:
        everything = embeddings(model, level)
    except ValueError as exc:
        raise InputError(f"{model_path}: {exc}") from None
    known = dict(zip(everything.ids.tolist(), everything.internal.tolist()))
    lines = []
    for query in ids:
        if query not in known:
            raise InputError(f"{model_path}: feature {query} has no level-{level} vector in the model")
        searched = group
        if searched is None and not all_groups and model.vocabulary is not None:
            searched = int(model.vocabulary.group_of[known[query]])
        emb = everything if searched is None else embeddings(model, level, searched)
        if query not in set(emb.ids.tolist()):  # --group other than the query's own: search it too
            emb = _with_query(everything, emb, known[query])
        found, cosine = most_similar(emb, query, top_k)
        lines += [f"{query}\t{r + 1}\t{i}\t{c:.6g}\n" for r, (i, c) in enumerate(zip(found.tolist(), cosine))]
    with Outputs() as outputs:
        outputs.write(out, lambda fh: fh.write("query\trank\tid\tcosine\n" + "".join(lines)))


def _with_query(everything, emb, internal):
    import numpy as np

    from rafmcli.embeddings import Embeddings

    pick = np.flatnonzero(everything.internal == internal)
    return Embeddings(np.concatenate([emb.ids, everything.ids[pick]]),
                      np.concatenate([emb.internal, everything.internal[pick]]),
                      np.concatenate([emb.vectors, everything.vectors[pick]]))
