"""`rafm dump`: a short pure-Python scorer that reads only the dump reproduces `rafm predict`."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main


def run(args):
    return CliRunner().invoke(main, args)


def read_text_dump(text):
    """{'w0', 'w', 'levels', 'v' (per id: list of per-level vectors or one vector), 'meta'} from the text."""
    sections, name = {}, None
    for line in text.split("\n")[:-1]:
        if line.startswith("#"):
            name = line
            sections[name] = []
        else:
            sections[name].append(line)
    meta_line = next(n for n in sections if n.startswith("#rafm "))
    meta = dict(kv.split("=") for kv in meta_line.split()[1:])
    floats = lambda line: [float(t) for t in line.split()]  # noqa: E731
    model = {"meta": meta, "w0": float(sections["#global bias W0"][0]),
             "w": [float(t) for t in sections["#unary interactions Wj"]]}
    if meta["model"] == "fm":
        model["levels"] = [1] * len(model["w"])
        model["v"] = [[floats(line)] for line in sections["#pairwise interactions Vj,f"]]
    elif meta["model"] == "difacto":
        model["levels"] = [int(t) for t in sections["#levels kj"]]
        model["v"] = [[floats(line)] for line in sections["#pairwise interactions Vj,f (rank D_kj)"]]
    else:
        model["levels"] = [int(t) for t in sections["#levels kj"]]
        per_level = [lines for n, lines in sections.items() if n.startswith("#pairwise interactions Vj,f level")]
        model["v"] = [[floats(lines[i]) for lines in per_level if lines[i]] for i in range(len(model["w"]))]
    return model


def score(model, row):
    """y(x) by the pair loop of rafm-files(5), then the task's finish."""
    kind = model["meta"]["model"]
    items = [(i, x) for i, x in row if i < len(model["w"]) and model["levels"][i] > 0]
    y = model["w0"] + sum(model["w"][i] * x for i, x in items)
    for a in range(len(items)):
        for b in range(a + 1, len(items)):
            (i, xi), (j, xj) = items[a], items[b]
            if kind == "rafm":
                level = min(model["levels"][i], model["levels"][j])
                vi, vj = model["v"][i][level - 1], model["v"][j][level - 1]
            else:
                vi, vj = model["v"][i][0], model["v"][j][0]
            y += sum(p * q for p, q in zip(vi, vj)) * xi * xj  # zip stops at the shorter: DiFacto
    if model["meta"]["task"] == "c":
        return 1 / (1 + math.exp(-y))
    return min(max(y, float(model["meta"]["target_min"])), float(model["meta"]["target_max"]))


def rows_of(path):
    rows = []
    for line in open(path):
        if line.split("#")[0].strip():
                rows.append([(int(t.split(":")[0]), float(t.split(":")[1]) if ":" in t else 1.0)
                         for t in line.split("#")[0].split()[1:]])
    return rows


def trained(tmp_path, sample, kind, task):
    name = "regression" if task == "r" else "classification"
    saved = tmp_path / f"{kind}.rafm"
    ranks = ["--dim", "6"] if kind == "fm" else ["--ranks", "4,16"]
    result = run(["train", "--task", task, "--model", kind, *ranks, "--train", sample(f"{name}.train"),
                  "--iter", "4", "--save-model", str(saved), "--quiet"])
    assert result.exit_code == 0, result.output
    return saved, sample(f"{name}.test")


@pytest.mark.parametrize("kind,task", [("fm", "r"), ("rafm", "c"), ("difacto", "r"), ("rafm", "r")])
def test_scorer_reading_only_the_text_dump_reproduces_predict(sample, tmp_path, kind, task):
    saved, test = trained(tmp_path, sample, kind, task)
    result = run(["dump", "--model", str(saved)])
    assert result.exit_code == 0, result.output
    model = read_text_dump(result.stdout)
    predicted = run(["predict", "--quiet", "--model", str(saved), test])
    expected = np.array(predicted.stdout.split(), dtype=float)
    ours = np.array([score(model, row) for row in rows_of(test)])
    # 1e-6, relative beyond 1: the kernel sums float32 products, this scorer float64 ones
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)
    if task == "r":
        assert ours.min() < ours.max()  # not a constant: the pairs matter


def test_fm_text_is_libfm_layout(sample, tmp_path):
    """libFM's loader: '#global bias W0', w0, '#unary interactions Wj', one weight per id,
    '#pairwise interactions Vj,f', one line of D space-separated values per id."""
    saved, _ = trained(tmp_path, sample, "fm", "r")
    lines = run(["dump", "--model", str(saved)]).stdout.split("\n")
    n = next(k for k, line in enumerate(lines) if line == "#pairwise interactions Vj,f") - 3
    assert lines[0] == "#global bias W0" and lines[2] == "#unary interactions Wj"
    factor_lines = lines[n + 4:2 * n + 4]
    assert all(len(line.split(" ")) == 6 for line in factor_lines)
    assert lines[2 * n + 4].startswith("#rafm model=fm")
    header = json.loads(run(["dump", "--model", str(saved), "--format", "json"]).stdout)
    assert n == max(f["id"] for f in header["features"]) + 1


@pytest.mark.parametrize("kind", ["rafm", "difacto"])
def test_scorer_reading_only_the_json_dump_reproduces_predict(sample, tmp_path, kind):
    saved, test = trained(tmp_path, sample, kind, "c")
    out = tmp_path / "m.json"
    assert run(["dump", "--model", str(saved), "--format", "json", "--out", str(out)]).exit_code == 0
    doc = json.loads(out.read_text())
    n = max(f["id"] for f in doc["features"]) + 1
    model = {"meta": {"model": doc["model"], "task": doc["task"]}, "w0": doc["w0"],
             "w": [0.0] * n, "levels": [0] * n, "v": [None] * n}
    for f in doc["features"]:
        model["w"][f["id"]], model["levels"][f["id"]], model["v"][f["id"]] = f["w"], f["level"], f["v"]
    expected = np.array(run(["predict", "--quiet", "--model", str(saved), test]).stdout.split(), dtype=float)
    ours = np.array([score(model, row) for row in rows_of(test)])
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)
    assert {len(f["v"]) for f in doc["features"]} == ({1, 2} if kind == "rafm" else {1})


def test_sparse_ids_refuse_text_not_json(tmp_path):
    data = tmp_path / "sparse.libfm"
    data.write_text("1 2000000000:1 5:1\n0 5:1 7:1\n1 7:1\n")
    saved = tmp_path / "m.rafm"
    assert run(["train", "--task", "c", "--train", str(data), "--holdout", "0", "--iter", "2",
                "--save-model", str(saved), "--quiet"]).exit_code == 0
    result = run(["dump", "--model", str(saved), "--out", str(tmp_path / "d.txt")])
    assert result.exit_code == 2 and "--format json" in result.output
    assert not (tmp_path / "d.txt").exists()
    assert run(["dump", "--model", str(saved), "--format", "json"]).exit_code == 0


def test_damaged_model_exit_2(tmp_path):
    bad = tmp_path / "bad.rafm"
    bad.write_text("not a zip")
    result = run(["dump", "--model", str(bad)])
    assert result.exit_code == 2 and "damaged" in result.output
