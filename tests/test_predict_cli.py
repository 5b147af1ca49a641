"""`rafm predict --raw` and `--metrics` through the CLI, metrics against plain-Python ones."""

import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main


def run(args):
    return CliRunner().invoke(main, args)


def labels_of(path):
    return [float(line.split()[0]) for line in open(path) if line.split("#")[0].strip()]


def saved_model(tmp_path, sample, task):
    name = "regression" if task == "r" else "classification"
    saved = tmp_path / "m.rafm"
    assert run(["train", "--task", task, "--ranks", "4,16", "--train", sample(f"{name}.train"), "--iter", "5",
                "--save-model", str(saved), "--quiet"]).exit_code == 0
    return saved, sample(f"{name}.test"), sample(f"{name}.validation")


def plain_metrics(task, labels, p):
    """The metrics by their definitions, pair counting for AUC."""
    n = len(labels)
    if task == "r":
        return {"rmse": math.sqrt(sum((a - b) ** 2 for a, b in zip(p, labels)) / n),
                "mae": sum(abs(a - b) for a, b in zip(p, labels)) / n}
    pos = [y > 0 for y in labels]
    logloss = -sum(math.log(q) if t else math.log(1 - q) for q, t in zip(p, pos)) / n
    wins = sum((a > b) + 0.5 * (a == b) for a, s in zip(p, pos) if s for b, t in zip(p, pos) if not t)
    auc = wins / (sum(pos) * (n - sum(pos)))
    accuracy = sum((q > 0.5) == t for q, t in zip(p, pos)) / n
    return {"logloss": logloss, "auc": auc, "accuracy": accuracy}


def printed(stderr, name):
    line = next(line for line in stderr.splitlines()
                if line.startswith(f"rafm: {name}: ") and line.endswith(" rows)"))
    pairs = re.findall(r"([a-z]+) ([-0-9.e+]+)", line.split(": ", 2)[2].split(" (")[0])
    rows = int(re.search(r"\(([\d,]+) rows\)", line).group(1).replace(",", ""))
    return {k: float(v) for k, v in pairs}, rows


@pytest.mark.parametrize("task", ["r", "c"])
def test_metrics_of_each_file_and_all(sample, tmp_path, task):
    saved, test, valid = saved_model(tmp_path, sample, task)
    result = run(["predict", "--metrics", "--model", str(saved), test, valid])
    assert result.exit_code == 0, result.output
    predictions = [float(v) for v in result.stdout.split()]
    lt, lv = labels_of(test), labels_of(valid)
    for name, labels, p in ((test, lt, predictions[:len(lt)]), (valid, lv, predictions[len(lt):]),
                            ("all files", lt + lv, predictions)):
        shown, rows = printed(result.stderr, name)
        expected = plain_metrics(task, labels, p)
        assert rows == len(labels) and set(shown) == set(expected)
        for k in expected:
            assert shown[k] == pytest.approx(expected[k], rel=2e-5), k


def test_no_metrics_without_the_flag(sample, tmp_path):
    saved, test, _ = saved_model(tmp_path, sample, "c")
    result = run(["predict", "--model", str(saved), test])
    assert "logloss" not in result.stderr


def test_raw_classification_gives_log_odds(sample, tmp_path):
    saved, test, _ = saved_model(tmp_path, sample, "c")
    prob = np.array(run(["predict", "--quiet", "--model", str(saved), test]).stdout.split(), dtype=float)
    raw = np.array(run(["predict", "--quiet", "--raw", "--model", str(saved), test]).stdout.split(), dtype=float)
    assert raw.min() < 0 < raw.max()
    np.testing.assert_allclose(1 / (1 + np.exp(-raw)), prob, atol=1e-8)


def test_raw_regression_is_not_clipped(tmp_path):
    train = tmp_path / "t.libfm"
    train.write_text("".join(f"{1 + (i % 3)} {i % 3}:1 {3 + i % 5}:{1 + i % 4}\n" for i in range(60)))
    test = tmp_path / "x.libfm"
    test.write_text("0 0:1 3:40\n0 2:1 4:-40\n0 1:1\n")
    saved = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--model", "fm", "--dim", "2", "--train", str(train), "--holdout", "0",
                "--iter", "30", "--save-model", str(saved), "--quiet"]).exit_code == 0
    clipped = np.array(run(["predict", "--quiet", "--model", str(saved), str(test)]).stdout.split(), dtype=float)
    raw = np.array(run(["predict", "--quiet", "--raw", "--model", str(saved), str(test)]).stdout.split(),
                   dtype=float)
    assert clipped.min() >= 1 and clipped.max() <= 3
    assert raw.min() < 1 or raw.max() > 3  # something was clipped
    np.testing.assert_allclose(np.clip(raw, 1, 3), clipped, rtol=1e-8)


def test_a_file_name_is_escaped_in_every_line_that_names_it(tmp_path, sample):
    """A test file named 'x<newline>rafm: fake.ok' cannot forge a line of its own in the unseen
    features' warning (predict, train --test) nor in predict's metrics line: every name is
    printable()'s, as in error lines."""
    model = saved_model(tmp_path, sample, "r")[0]
    name = tmp_path / "x\nrafm: fake.ok"
    name.write_bytes(open(sample("regression.test"), "rb").read() + b"0 999999:1\n")
    predicted = run(["predict", "--model", str(model), "--metrics", "--out", str(tmp_path / "p.txt"), str(name)])
    trained = run(["train", "--task", "r", "--train", sample("regression.train"), "--iter", "1", "--test", str(name),
                   "--out", str(tmp_path / "q.txt")])
    escaped = str(name).replace("\n", "\\n")
    for result, named in ((predicted, 2), (trained, 1)):  # train --test: the warning (no metrics line)
        assert result.exit_code == 0, result.output
        lines = [line for line in result.stderr.splitlines() if "fake.ok" in line]
        assert len(lines) == named and all(line.startswith("rafm: ") and escaped in line for line in lines), lines
