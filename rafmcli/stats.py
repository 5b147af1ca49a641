"""`rafm stats`: what a file looks like and what each model would cost on it."""

import numpy as np

from rafmcli.kernels import read_only
from rafmcli.levels import assign_levels, summarize

MAX_DISTINCT_LABELS = 10
BAR_WIDTH = 40
_NAMES = {"fm": "FM", "difacto": "DiFacto", "rafm": "RaFM"}


def occurrence_histogram(counts):
    """Features per power-of-two bucket of n_i: 1, 2, 3-4, 5-8, ... (paper Fig. 1)."""
    from rafmcli.kernels.counting import occurrence_buckets

    counts = np.asarray(counts)
    if counts.size == 0:
        return []
    return _histogram_rows(occurrence_buckets(*read_only(counts)))


def _histogram_rows(per_bucket):
    """Rows of the histogram from features per bucket (bucket b holds 2^(b-1) < n <= 2^b;
    n = 1 is bucket 0), up to the last non-empty bucket."""
    nonzero = np.flatnonzero(per_bucket)
    if nonzero.size == 0:
        return []
    per_bucket = per_bucket[:nonzero[-1] + 1]
    rows = []
    for b, features in enumerate(per_bucket):
        lo, hi = (1, 1) if b == 0 else (2 ** (b - 1) + 1, 2**b)
        rows.append({"from": int(lo), "to": int(hi), "features": int(features)})
    return rows


def mean(values):
    """The mean in float64, without overflow when the sum exceeds the float range
    (labels near 1.7e308): then the values are scaled by their largest magnitude first."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        total = values.mean()
        if not np.isfinite(total):
            scale = np.abs(values).max()
            total = (values / scale).mean() * scale
    return float(total)


def label_summary(labels):
    labels = np.asarray(labels)
    out = {"min": None, "mean": None, "max": None, "distinct": None}
    if labels.size:
        out.update(min=float(labels.min()), mean=mean(labels), max=float(labels.max()))
        from rafmcli.kernels.counting import distinct_values

        distinct, few = distinct_values(*read_only(labels), MAX_DISTINCT_LABELS)
        if few:
            out["distinct"] = [float(v) for v in distinct]
    return out


def file_stats(data, ranks):
    """Everything `rafm stats` reports about one Dataset (or reader.Tally), as plain Python values."""
    features, first, last, histogram, summary = _features(data, ranks)
    fm_params, fm_cost = summary.params("fm"), summary.cost("fm")
    models = {}
    for model in ("fm", "difacto", "rafm"):
        params, cost = summary.params(model), summary.cost(model)
        models[model] = {
            "params": params,
            "params_ratio": params / fm_params,
            "cost_per_row": cost,
            "cost_ratio": cost / fm_cost if fm_cost else None,
        }
    return {
        "file": data.path,
        "rows": data.n_rows,
        "features": features,
        "nonzeros": data.nnz,
        "nonzeros_per_row": data.nnz / data.n_rows if data.n_rows else 0.0,
        "rows_with_repeats": int(data.rows_with_repeats),
        "fields": field_sizes(data.feature_fields),
        "min_index": first,
        "max_index": last,
        "labels": label_summary(data.labels),
        "histogram": histogram,
        "ranks": list(ranks),
        "levels": [
            {"level": k + 1, "rank": ranks[k], "features": int(summary.size[k]),
             "top_level": int(summary.top[k]), "nonzeros_per_row": float(summary.occupancy[k])}
            for k in range(len(ranks))
        ],
        "models": models,
    }


def _features(data, ranks):
    """(features, smallest id, largest id (None when none), histogram rows, LevelSummary):
    from a Tally's table of n_i in one pass on every core, else from the ids and counts."""
    table = getattr(data, "table", None)
    if table is not None:
        from rafmcli.kernels.counting import table_summary
        from rafmcli.levels import level_bounds, summary_of_totals

        features, first, last, buckets, top, per_level = table_summary(table, level_bounds(ranks))
        summary = summary_of_totals(top, per_level, data.n_rows, ranks, features)
        return features, (first if features else None), (last if features else None), _histogram_rows(buckets), \
            summary
    ids = data.feature_ids
    levels = assign_levels(data.counts, ranks)
    summary = summarize(levels, data.counts, data.n_rows, ranks)
    has_ids = ids.size > 0
    return (int(ids.size), int(ids[0]) if has_ids else None, int(ids[-1]) if has_ids else None,
            occurrence_histogram(data.counts), summary)


def field_sizes(fields):
    """A libFFM file's fields as [{"field": f, "features": n}, ...] (None for libSVM/libFM)."""
    if fields is None:
        return None
    ids, sizes = np.unique(np.asarray(fields), return_counts=True)
    return [{"field": int(f), "features": int(n)} for f, n in zip(ids, sizes)]


def strict_json(value):
    """``value`` with every non-finite float as None: JSON that any parser reads
    (``json.dumps(..., allow_nan=False)`` then cannot fail)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _g(x):
    return f"{x:.6g}"


def render_text(stats, bar="█"):
    """The human-readable report for one file."""
    s = stats
    lines = [f"file         {s['file']}", f"rows         {s['rows']:,}"]
    if s["min_index"] is None:
        lines.append("features     0")
    else:
        base = "0-based" if s["min_index"] == 0 else "no index 0: 1-based?" if s["min_index"] == 1 else "sparse ids"
        lines.append(f"features     {s['features']:,} distinct, ids {s['min_index']}..{s['max_index']} ({base})")
    lines.append(f"non-zeros    {s['nonzeros']:,} ({s['nonzeros_per_row']:.2f} per row)")
    if s["fields"] is not None:
        shown = ", ".join(f"{f['field']} ({f['features']:,})" for f in s["fields"][:8])
        more = f", ... ({len(s['fields']) - 8:,} more)" if len(s["fields"]) > 8 else ""
        lines.append(f"fields       {len(s['fields']):,} (libFFM; features per field): {shown}{more}")
    if s["rows_with_repeats"]:
        lines.append(f"repeats      {s['rows_with_repeats']:,} rows repeat a feature index (values summed)")
    lab = s["labels"]
    if lab["min"] is not None:
        text = f"min {_g(lab['min'])}, mean {_g(lab['mean'])}, max {_g(lab['max'])}"
        if lab["distinct"] is not None:
            text = "{" + ", ".join(_g(v) for v in lab["distinct"]) + "}; " + text
        lines.append(f"labels       {text}")
    if s["histogram"]:
        lines += ["", "features by number of rows they occur in (n_i)"]
        top = max(h["features"] for h in s["histogram"]) or 1
        for h in s["histogram"]:
            span = str(h["from"]) if h["from"] == h["to"] else f"{h['from']}-{h['to']}"
            width = round(BAR_WIDTH * h["features"] / top)
            if h["features"] and not width:
                width = 1
            lines.append(f"{span:>13}  {bar * width:<{BAR_WIDTH}} {h['features']:,}")
    ranks = s["ranks"]
    lines += ["", f"rank levels {','.join(map(str, ranks))} (paper Eq. 17)",
              "level  rank D_k  features |F_k|  top level here  non-zeros/row n(F_k)"]
    for lv in s["levels"]:
        lines.append(f"{lv['level']:>5}  {lv['rank']:>8}  {lv['features']:>14,}  "
                     f"{lv['top_level']:>14,}  {lv['nonzeros_per_row']:>19.2f}")
    lines += ["", "model          parameters  vs FM  pair cost/row  vs FM"]
    for model, m in s["models"].items():
        name = f"{_NAMES[model]}({ranks[-1]})" if model == "fm" else _NAMES[model]
        ratio = "-" if m["cost_ratio"] is None else f"{m['cost_ratio']:.2f}"
        lines.append(f"{name:<12} {m['params']:>12,}  {m['params_ratio']:>5.2f}  "
                     f"{m['cost_per_row']:>13,.0f}  {ratio:>5}")
    return "\n".join(lines)
