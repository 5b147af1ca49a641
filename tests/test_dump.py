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
    """[{'meta', 'w0', 'w', 'levels', 'v' (per id: list of per-level vectors or one vector)}, one a sample]
    from the text: blocks after '#rafm sample s of K' lines, or the whole text; missing W0, Wj: zeros."""
    lines = text.split("\n")[:-1]
    meta = dict(kv.split("=") for kv in lines[-1].split()[1:])
    blocks = [[]]
    for line in lines[:-1]:
        if line.startswith("#rafm sample "):
            blocks.append([])
        else:
            blocks[-1].append(line)
    blocks = [b for b in blocks if b]
    assert len(blocks) == int(meta["samples"])
    return [_text_sample(block, meta) for block in blocks]


def _text_sample(lines, meta):
    sections, name = {}, None
    for line in lines:
        if line.startswith("#"):
            name = line
            sections[name] = []
        else:
            sections[name].append(line)
    floats = lambda line: [float(t) for t in line.split()]  # noqa: E731
    model = {"meta": meta}
    if meta["model"] == "fm":
        model["v"] = [[floats(line)] for line in sections["#pairwise interactions Vj,f"]]
        model["levels"] = [1] * len(model["v"])
    elif meta["model"] == "difacto":
        model["levels"] = [int(t) for t in sections["#levels kj"]]
        model["v"] = [[floats(line)] for line in sections["#pairwise interactions Vj,f (rank D_kj)"]]
    else:
        model["levels"] = [int(t) for t in sections["#levels kj"]]
        per_level = [lines for n, lines in sections.items() if n.startswith("#pairwise interactions Vj,f level")]
        model["v"] = [[floats(lines[i]) for lines in per_level if lines[i]] for i in range(len(model["levels"]))]
    model["w0"] = float(sections.get("#global bias W0", ["0"])[0])
    model["w"] = [float(t) for t in sections.get("#unary interactions Wj", ["0"] * len(model["levels"]))]
    return model


def read_json_dump(doc):
    """The samples of a JSON dump, in read_text_dump's form."""
    n = max(f["id"] for draw in doc.get("draws", [doc]) for f in draw["features"]) + 1
    samples = []
    for draw in doc.get("draws", [doc]):
        model = {"meta": doc, "w0": draw["w0"], "w": [0.0] * n, "levels": [0] * n, "v": [None] * n}
        for f in draw["features"]:
            model["w"][f["id"]], model["levels"][f["id"]], model["v"][f["id"]] = f["w"], f["level"], f["v"]
        samples.append(model)
    assert len(samples) == doc["samples"]
    return samples


def margin(model, row):
    """y(x) by the pair loop of rafm-files(5)."""
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
    return y


def score(samples, row, raw=False):
    """rafm-files(5)'s prediction: the mean over the samples of f(y), f by task and link (raw: y)."""
    meta = samples[0]["meta"]
    total = 0.0
    for model in samples:
        y = margin(model, row)
        if raw:
            total += y
        elif meta["task"] == "c":
            total += 0.5 * math.erfc(-y / math.sqrt(2)) if meta["link"] == "probit" else 1 / (1 + math.exp(-y))
        else:
            total += min(max(y, float(meta["target_min"])), float(meta["target_max"]))
    return total / len(samples)


def rows_of(path):
    rows = []
    for line in open(path):
        if line.split("#")[0].strip():
                rows.append([(int(t.split(":")[0]), float(t.split(":")[1]) if ":" in t else 1.0)
                         for t in line.split("#")[0].split()[1:]])
    return rows


def trained(tmp_path, sample, kind, task, method=None):
    name = "regression" if task == "r" else "classification"
    saved = tmp_path / f"{kind}.rafm"
    ranks = ["--dim", "6"] if kind == "fm" else ["--ranks", "4,16"]
    how = ["--method", method] if method else []
    if method == "mcmc":
        how += ["--iter", "8", "--keep-samples", "3"]
    result = run(["train", "--task", task, "--model", kind, *ranks, "--train", sample(f"{name}.train"),
                  "--iter", "4", *how, "--save-model", str(saved), "--quiet"])
    assert result.exit_code == 0, result.output
    return saved, sample(f"{name}.test")


# (kind, task, method): the default method (logit), sgd, MCMC regression (3 samples), probit classifiers
CASES = [("fm", "r", None), ("rafm", "c", None), ("difacto", "r", None), ("rafm", "r", None), ("fm", "c", "sgd"),
         ("fm", "r", "mcmc"), ("fm", "c", "als"), ("rafm", "c", "mcmc")]


@pytest.mark.parametrize("kind,task,method", CASES)
def test_scorer_reading_only_the_dump_reproduces_predict(sample, tmp_path, kind, task, method):
    """rafm-files(5)'s rule on the text and the JSON dump gives rafm predict's values and --raw's."""
    saved, test = trained(tmp_path, sample, kind, task, method)
    rows = rows_of(test)
    expected = {raw: np.array(run(["predict", "--quiet", "--model", str(saved), *(["--raw"] * raw), test])
                              .stdout.split(), dtype=float) for raw in (False, True)}
    for fmt in ("text", "json"):
        result = run(["dump", "--model", str(saved), "--format", fmt])
        assert result.exit_code == 0, result.output
        samples = read_text_dump(result.stdout) if fmt == "text" else read_json_dump(json.loads(result.stdout))
        for raw in (False, True):
            ours = np.array([score(samples, row, raw) for row in rows])
            # 1e-6, relative beyond 1: the kernel sums float32 products, this scorer float64 ones
            np.testing.assert_allclose(ours, expected[raw], rtol=1e-6, atol=1e-6)
        known = [v for v, k in zip(samples[0]["v"], samples[0]["levels"]) if k]
        assert {len(v) for v in known} == ({1, 2} if kind == "rafm" else {1})  # RaFM: a vector a level
    assert len(samples) == (3 if method == "mcmc" else 1)
    assert samples[0]["meta"]["link"] == ("probit" if task == "c" and method in ("als", "mcmc") else "logit")
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
    assert lines[2 * n + 4].startswith("#rafm model=fm") and lines[2 * n + 4].endswith(" link=logit samples=1")
    header = json.loads(run(["dump", "--model", str(saved), "--format", "json"]).stdout)
    assert n == max(f["id"] for f in header["features"]) + 1
    assert (header["format_version"], header["samples"], header["link"]) == (2, 1, "logit")


@pytest.mark.parametrize("off", ["--no-bias", "--no-linear"])
def test_sections_of_unused_terms_are_left_out(sample, tmp_path, off):
    """libFM's -save_model with -dim 0,1,k (1,0,k) writes no W0 (Wj) section, and its -load_model wants none."""
    saved, test = tmp_path / "m.rafm", sample("regression.test")
    assert run(["train", "--task", "r", "--model", "fm", "--dim", "4", "--method", "sgd", off, "--iter", "3",
                "--train", sample("regression.train"), "--save-model", str(saved), "--quiet"]).exit_code == 0
    text = run(["dump", "--model", str(saved)]).stdout
    lines = text.split("\n")
    assert ("#global bias W0" in lines, "#unary interactions Wj" in lines) == (off != "--no-bias", off == "--no-bias")
    assert lines[0] == ("#unary interactions Wj" if off == "--no-bias" else "#global bias W0")
    expected = np.array(run(["predict", "--quiet", "--model", str(saved), test]).stdout.split(), dtype=float)
    samples = read_text_dump(text)
    np.testing.assert_allclose([score(samples, row) for row in rows_of(test)], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method", ["sgd", "als", "mcmc"])
def test_dump_model_is_the_dump_of_the_saved_model(sample, tmp_path, method):
    """rafm train --dump-model (rafm libfm -save_model) writes of the model in memory what rafm dump
    writes of its file: plain numbers (not numpy's 'np.float64(...)', which libFM reads as 0)."""
    saved, dumped = tmp_path / "m.rafm", tmp_path / "m.txt"
    result = run(["train", "--task", "c", "--model", "fm", "--dim", "4", "--method", method, "--iter", "6",
                  "--train", sample("classification.train"), "--save-model", str(saved), "--dump-model", str(dumped),
                  "--quiet"])
    assert result.exit_code == 0, result.output
    assert dumped.read_text() == run(["dump", "--model", str(saved)]).stdout


def test_mcmc_dump_puts_no_single_sample_where_one_model_is_read(sample, tmp_path):
    """K > 1: the text starts with '#rafm sample 1 of K', the JSON has draws and no top-level model;
    rafm's own reader of text models refuses the text in one line."""
    saved, _ = trained(tmp_path, sample, "fm", "r", "mcmc")
    text = tmp_path / "m.txt"
    assert run(["dump", "--model", str(saved), "--out", str(text)]).exit_code == 0
    lines = text.read_text().split("\n")
    assert lines[0] == "#rafm sample 1 of 3" and lines.count("#global bias W0") == 3
    doc = json.loads(run(["dump", "--model", str(saved), "--format", "json"]).stdout)
    assert "features" not in doc and "w0" not in doc and len(doc["draws"]) == 3
    result = run(["train", "--task", "r", "--method", "sgd", "--dim", "6", "--train", sample("regression.train"),
                  "--init-model", str(text), "--iter", "1", "--quiet"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "m.txt:1: '#rafm sample 1 of 3': a dump of an MCMC model's samples cannot be loaded" in result.output


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
