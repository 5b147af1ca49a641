"""`rafm stats --plot` and `rafm plot`: files rendered through the CLI, and the plotted data read back
from the figure's artists (not pixels) equal to the inputs; without matplotlib, exit 2."""

import math
import sys
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.io.reader import read_dataset

pytest.importorskip("matplotlib")

MAGIC = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}


@pytest.fixture
def drawn(monkeypatch):
    """Every figure the CLI saves, captured as it is written."""
    from matplotlib.figure import Figure

    figures = []
    save = Figure.savefig

    def spy(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return figures


def lines(fig, gid):
    return [line for ax in fig.axes for line in ax.get_lines() if line.get_gid() == gid]


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_stats_plot_is_the_histogram_with_level_boundaries(sample, tmp_path, drawn, fmt):
    files = [sample("classification.train"), sample("regression.test")]
    out = tmp_path / f"freq.{fmt}"
    result = CliRunner().invoke(main, ["stats", "--ranks", "4,16,64", "--plot", str(out), *files])
    assert result.exit_code == 0, result.output
    assert "rows" in result.stdout  # the report is still printed
    assert out.read_bytes().startswith(MAGIC[fmt])
    (fig,) = drawn
    histograms = lines(fig, "histogram")
    assert [h.get_label() for h in histograms] == ["classification.train.libfm", "regression.test.libfm"]
    for h, path in zip(histograms, files):
        counts = read_dataset(path).counts
        expected = {}
        for n in counts:
            expected[int(n)] = expected.get(int(n), 0) + 1
        assert dict(zip(h.get_xdata().astype(int).tolist(), h.get_ydata().astype(int).tolist())) == expected
    boundaries = sorted(line.get_xdata()[0] for line in lines(fig, "boundary"))
    assert boundaries == pytest.approx([math.sqrt(4 * 16), math.sqrt(16 * 64)])
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_plot_overlays_runs_per_column(sample, tmp_path, drawn):
    logs = []
    for kind, extra in (("rafm", ["--ranks", "4,16"]), ("fm", ["--model", "fm", "--dim", "4"])):
        log = tmp_path / f"{kind}.tsv"
        assert CliRunner().invoke(main, ["train", "--task", "c", *extra, "--train", sample("classification.train"),
                                         "--iter", "4", "--rlog", str(log), "--quiet"]).exit_code == 0
        logs.append(log)
    out = tmp_path / "curves.svg"
    result = CliRunner().invoke(main, ["plot", str(logs[0]), str(logs[1]), "--label", "RaFM", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(MAGIC["svg"])
    (fig,) = drawn
    for name in ("train_loss", "logloss", "auc", "accuracy"):
        drawn_lines = lines(fig, name)
        assert [line.get_label() for line in drawn_lines] == ["RaFM", "fm"]
        for line, log in zip(drawn_lines, logs):
            table = np.genfromtxt(log, names=True, delimiter="\t")
            np.testing.assert_array_equal(line.get_xdata(), table["epoch"])
            np.testing.assert_array_equal(line.get_ydata(), table[name])


def test_bad_inputs_exit_2(tmp_path):
    log = tmp_path / "log.tsv"
    log.write_text("epoch\tseconds\ttrain_loss\n1\t0.1\t0.5\n2\t0.1\tx\n")
    result = CliRunner().invoke(main, ["plot", str(log), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 2 and f"{log}:3: not a number (x)" in result.output
    result = CliRunner().invoke(main, ["plot", str(log), "-o", str(tmp_path / "c.jpg")])
    assert result.exit_code == 2 and ".png" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.tsv"]


def test_logs_that_cannot_be_read_or_drawn_exit_2_in_one_line(tmp_path):
    """A byte that is not UTF-8 (a UnicodeDecodeError traceback) and values whose span overflows
    a float (matplotlib's ValueError, with RuntimeWarnings) are one line each, exit 2; a file
    name that is not UTF-8 shows its byte (\\xff, not Python's \\udcff)."""
    log = tmp_path / "log\udcff.tsv"  # the byte 0xff, as Python names it
    log.write_bytes(b"epoch\tseconds\ttrain_loss\n1\t0.1\t\xe9\n")
    far = tmp_path / "far.tsv"
    far.write_text("epoch\tseconds\ttrain_loss\n1\t0.1\t1e308\n2\t0.1\t-1e308\n")
    result = CliRunner().invoke(main, ["plot", str(log), "-o", str(tmp_path / "c.png")])
    assert (result.exit_code, result.output.splitlines()) == (2, [f"Error: {tmp_path}/log\\xff.tsv:2: not a number "
                                                                   f"(\\xe9)"])
    with warnings.catch_warnings(record=True) as caught:  # none shown to the user
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["plot", str(far), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 2 and caught == []
    assert result.output.splitlines() == [f"Error: {far}: values too far apart to draw (arange: cannot compute length)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["far.tsv", "log\udcff.tsv"]


def test_an_infinite_value_and_a_log_without_values_name_their_file(tmp_path):
    """A log holding inf is FILE:LINE: value is not finite (inf) (it said 'only NaN'); logs with no
    value to plot are named by their paths, suffix kept (it gave the label, 'rlh')."""
    inf, header, nan = tmp_path / "rlinf.tsv", tmp_path / "rlh.tsv", tmp_path / "rln.tsv"
    inf.write_text("epoch\ttrain_loss\n1\t0.5\n2\t-inf\n")
    header.write_text("epoch\ttrain_loss\n")
    nan.write_text("epoch\ttrain_loss\tauc\n1\tnan\tnan\n")
    for logs, line in (([inf], f"Error: {inf}:3: value is not finite (-inf)"),
                       ([header], f"Error: {header}: no values to plot (no epoch has a train_loss or validation "
                                  f"metric)"),
                       ([header, nan], f"Error: {header}, {nan}: no values to plot (no epoch has a train_loss or "
                                       f"validation metric)")):
        result = CliRunner().invoke(main, ["plot", *map(str, logs), "-o", str(tmp_path / "c.png")])
        assert (result.exit_code, result.output.splitlines()) == (2, [line])
    assert not (tmp_path / "c.png").exists()


def test_without_matplotlib_exit_2_with_the_install_command(sample, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    log = tmp_path / "log.tsv"
    log.write_text("epoch\tseconds\ttrain_loss\n1\t0.1\t0.5\n")
    for args in (["plot", str(log), "-o", str(tmp_path / "c.png")],
                 ["stats", sample("regression.test"), "--plot", str(tmp_path / "f.png")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "pip install 'rafm[plot]'" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.tsv"]


def test_a_log_named_or_headed_in_bytes_that_are_not_utf8_is_drawn(tmp_path):
    """Its name (the line's label) and a column's name reached matplotlib undecodable (a TypeError
    traceback): they are drawn as printable text, \\xff."""
    log = tmp_path / "l\udcffg.tsv"
    log.write_bytes(b"epoch\tseconds\ttrain_loss\tr\xffmse\n1\t0.1\t0.5\t0.9\n2\t0.1\t0.4\t0.8\n")
    result = CliRunner().invoke(main, ["plot", str(log), "-o", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.png").stat().st_size > 0
