"""`rafm similar`: the features (or group values) nearest a feature by cosine of their embeddings."""

import click

from rafmcli.cli.options import LEVEL, MODEL, OUTPUT, TOP_K, check_group, distinct_files, load_model
from rafmcli.options import DEFAULTS as D
from rafmcli.options import EMBED_LEVEL


@click.command()
@click.option("--model", "model_path", type=MODEL, required=True, help="Model file written by rafm train.")
@click.option("--top-k", "-k", type=TOP_K, default=D.top_k, show_default=True, help="Neighbours per feature.")
@click.option("--level", type=LEVEL, default=EMBED_LEVEL, show_default=True,
              help="RaFM and DiFacto: the level whose vectors to compare, or all: every level's side by side "
                   "(zeros where a feature has none).")
@click.option("--group", type=click.IntRange(0),
              help="Search this group's values.  [default: each ID's own group if the model has groups, "
                   "else all features]")
@click.option("--all-groups", is_flag=True, help="Search every feature's own vector, whatever its group.")
@click.option("--out", type=OUTPUT, default="-", show_default=True, help="Where to write the table; - for stdout.")
@click.argument("ids", nargs=-1, required=True, type=click.IntRange(0))
def similar(model_path, top_k, level, group, all_groups, out, ids):
    """For each feature ID, the k nearest embeddings (those of rafm embed) by cosine.

    In a model with groups, a group's values are searched (rafm embed --group:
    an item with its genres is the sum of their vectors) and ID stands for the
    value of its group that holds it (a feature in several values, such as a
    genre, stands for its own vector); --all-groups searches every feature's
    own vector.

    Output: tab-separated, a header line, then `query rank id cosine` per
    neighbour (a value's id: its feature ids joined by commas).
    """
    distinct_files({"--model": model_path}, {"--out": out})
    from rafmcli.embeddings import embeddings, most_similar, value_embeddings, value_of
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
    values = {}  # group -> its value embeddings, built once
    lines = []
    for query in ids:
        if query not in known:
            has = "is not in" if level is None else f"has no level-{level} vector in"
            raise InputError(f"{model_path}: feature {query} {has} the model")
        vector, exclude, emb = everything.vectors[known[query]], -1, everything
        if not all_groups and model.vocabulary is not None:
            own = int(model.vocabulary.group_of[known[query]])
            searched = own if group is None else group
            for g in {own, searched}:
                if g not in values:
                    values[g] = value_embeddings(model, level, g)
            emb = values[searched]
            value = value_of(model, known[query])
            row = {int(v): r for r, v in enumerate(values[own].internal.tolist())}.get(value)
            if row is not None:  # the query's value stands for it
                vector = values[own].vectors[row]
                exclude = row if searched == own else -1
        else:
            exclude = known[query]
        found, cosine = most_similar(emb, vector, top_k, exclude)
        lines += [f"{query}\t{r + 1}\t{i}\t{c:.6g}\n" for r, (i, c) in enumerate(zip(found, cosine))]
    with Outputs() as outputs:
        outputs.write(out, lambda fh: fh.write("query\trank\tid\tcosine\n" + "".join(lines)))
