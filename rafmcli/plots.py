"""Figures: the feature-frequency histogram (paper Fig. 1) and training curves from --rlog files.

matplotlib is optional (``pip install 'rafm[plot]'``) and imported only here,
without pyplot: figures are plain ``matplotlib.figure.Figure`` objects,
written with their own ``savefig`` (no display, no global state).
"""

import math
import os
from dataclasses import dataclass

import numpy as np

from rafmcli.errors import InputError, printable
from rafmcli.io.side_files import read_bytes, text_lines

FORMATS = ("png", "svg", "pdf")
INSTALL = "pip install 'rafm[plot]'"


class PlotUnavailable(InputError):
    """matplotlib is not installed: exit 2 with the install command."""


def figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(f"plots need matplotlib: {INSTALL} (or pip install matplotlib)") from None
    return Figure


def image_format(path):
    """png, svg or pdf from the file name; ValueError otherwise."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise ValueError(f"{path}: the file name must end in .{', .'.join(FORMATS)} (the image format)")
    return ext


def level_boundaries(ranks):
    """Eq. 17's boundaries: a feature moves from level k to k+1 above n = sqrt(D_k D_{k+1})."""
    return [math.sqrt(a * b) for a, b in zip(ranks, ranks[1:])]


def frequency_figure(named_counts, ranks):
    """Log-log histogram: for each n, the number of features occurring in n rows (one line per file),
    with Eq. 17's level boundaries of ``ranks`` as vertical lines, as the paper's Figure 1."""
    fig = figure_class()(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for name, counts in named_counts:
        n, features = np.unique(np.asarray(counts), return_counts=True)
        keep = n > 0
        ax.plot(n[keep], features[keep], marker=".", linestyle="none", label=name, gid="histogram")
    for k, x in enumerate(level_boundaries(ranks), 1):
        ax.axvline(x, color="0.4", linestyle="--", linewidth=1, gid="boundary",
                   label=f"levels of {','.join(map(str, ranks))}" if k == 1 else None)
        ax.annotate(f"{k}|{k + 1}", (x, 1), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(2, -12), fontsize=8, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows a feature occurs in (n_i)")
    ax.set_ylabel("features")
    ax.set_title("feature frequencies")
    ax.legend(fontsize=8)
    return fig


@dataclass
class TrainLog:
    """One --rlog file: its label, columns (name -> float array, NaN where missing) and path."""

    label: str
    columns: dict
    path: str = ""


def read_log(path, label=None):
    """A --rlog table: a tab-separated header, then one row of numbers per epoch."""
    lines = text_lines(read_bytes(path, "--rlog file"), "utf-8", "surrogateescape")
    if not lines or "epoch" not in lines[0].split("\t"):
        raise InputError(f"{printable(path)}:1: not a rafm --rlog file (no 'epoch' column in the header)")
    names = [printable(name) for name in lines[0].split("\t")]  # what matplotlib can draw
    rows = []
    for line_no, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(names):
            raise InputError(f"{printable(path)}:{line_no}: {len(cells)} columns, the header has {len(names)}")
        try:
            rows.append([float(c) for c in cells])
        except ValueError:
            bad = next(c for c in cells if not _is_float(c))
            raise InputError(f"{printable(path)}:{line_no}: not a number ({printable(bad, 40)})") from None
        infinite = next((c for c, v in zip(cells, rows[-1]) if math.isinf(v)), None)
        if infinite is not None:  # NaN marks a missing value; rafm never logs an infinite one
            raise InputError(f"{printable(path)}:{line_no}: value is not finite ({printable(infinite, 40)})")
    table = np.array(rows, dtype=float).reshape(len(rows), len(names))
    label = printable(label or os.path.splitext(os.path.basename(path))[0])
    return TrainLog(label, {name: table[:, k] for k, name in enumerate(names)}, str(path))


def _is_float(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def curve_names(logs):
    """The columns to plot, in file order: train_loss, then every validation metric with a value."""
    names = []
    for log in logs:
        for name, values in log.columns.items():
            if name not in ("epoch", "seconds") and name not in names and np.any(np.isfinite(values)):
                names.append(name)
    return names


def curves_figure(logs):
    """One panel per column (train_loss, validation metrics), one line per run, x = epoch."""
    names = curve_names(logs)
    if not names:
        raise InputError(f"{', '.join(printable(log.path or log.label) for log in logs)}: no values to plot "
                         f"(no epoch has a train_loss or validation metric)")
    cols = min(len(names), 3)
    rows = math.ceil(len(names) / cols)
    fig = figure_class()(figsize=(4.2 * cols, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        for log in logs:
            if name in log.columns:
                ax.plot(log.columns["epoch"], log.columns[name], marker=".", label=log.label, gid=name)
        ax.set_title(name if name == "train_loss" else f"validation {name}")
        ax.set_xlabel("epoch")
    for ax in axes[len(names):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    return fig


def write(fig, fh, fmt):
    """Render ``fig`` into the binary file ``fh``."""
    fig.savefig(fh, format=fmt, dpi=120)
