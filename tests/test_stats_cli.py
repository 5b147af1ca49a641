import json

import numpy as np
from click.testing import CliRunner

from rafmcli import __version__
from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.levels import assign_levels


def test_json_agrees_with_reader(sample):
    path = sample("regression.train")
    result = CliRunner().invoke(main, ["stats", "--json", "--ranks", "4,16,64", path])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["rafm_version"] == __version__
    (s,) = report["files"]
    data = read_dataset(path)
    assert s["rows"] == data.n_rows == 3000
    assert s["nonzeros"] == data.nnz
    assert s["features"] == data.feature_ids.size
    assert (s["min_index"], s["max_index"]) == (data.feature_ids[0], data.feature_ids[-1])
    assert sum(h["features"] for h in s["histogram"]) == s["features"]
    for h in s["histogram"]:
        inside = (data.counts >= h["from"]) & (data.counts <= h["to"])
        assert h["features"] == inside.sum()
    levels = assign_levels(data.counts, (4, 16, 64))
    assert [lv["features"] for lv in s["levels"]] == [(levels >= k).sum() for k in (1, 2, 3)]
    assert s["labels"]["min"] == data.labels.min() and s["labels"]["distinct"] is None
    assert s["models"]["fm"]["params"] == s["features"] * 65 + 1
    assert s["models"]["rafm"]["params"] < s["models"]["fm"]["params"]


def test_text_report(sample):
    result = CliRunner().invoke(main, ["stats", sample("classification.train")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "rows         3,000" in out
    assert "{0, 1}" in out
    assert "rank levels 32,512" in out
    for name in ("FM(512)", "DiFacto", "RaFM"):
        assert name in out


def test_several_files_json(sample):
    files = [sample("classification.train"), sample("classification.test")]
    result = CliRunner().invoke(main, ["stats", "--json", *files])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert [f["file"] for f in report["files"]] == files
    assert [f["rows"] for f in report["files"]] == [3000, 600]


def test_bad_ranks_option(sample):
    result = CliRunner().invoke(main, ["stats", "--ranks", "512,32", sample("classification.test")])
    assert result.exit_code == 2
    assert "strictly increasing" in result.output


def test_histogram_buckets():
    from rafmcli.stats import occurrence_histogram

    rows = occurrence_histogram(np.array([1, 1, 2, 3, 4, 5, 8, 9, 130]))
    assert [(r["from"], r["to"], r["features"]) for r in rows] == [
        (1, 1, 2), (2, 2, 1), (3, 4, 2), (5, 8, 2), (9, 16, 1), (17, 32, 0), (33, 64, 0),
        (65, 128, 0), (129, 256, 1)]
