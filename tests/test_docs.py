"""The manual cannot drift from the CLI: pages render cleanly, document exactly
the options click knows (with their defaults), and their examples and README's
commands run on data_samples/."""

import os
import re
import shlex
import shutil
import subprocess

import click
import pytest
from click.testing import CliRunner
from conftest import ROOT

from rafmcli.cli import main

MAN = os.path.join(ROOT, "man")
PAGES = {"rafm.1": None, "rafm-train.1": "train", "rafm-tune.1": "tune", "rafm-predict.1": "predict",
         "rafm-stats.1": "stats", "rafm-dump.1": "dump", "rafm-libfm.1": "libfm", "rafm-plot.1": "plot",
         "rafm-recommend.1": "recommend",
         "rafm-embed.1": "embed", "rafm-similar.1": "similar", "rafm-files.5": None}


def read(page):
    with open(os.path.join(MAN, page), encoding="utf-8") as fh:
        return fh.read()


def sections(text):
    """{section name: its roff lines}."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith(".SH "):
            name = line[4:].strip().strip('"')
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def unroff(line):
    return re.sub(r"\\f[BIRP]", "", line).replace("\\-", "-").replace('" "', " ")


def documented_options(page):
    """{--option: its paragraph} from the OPTIONS section's .TP entries."""
    lines = sections(read(page))["OPTIONS"]
    entries, current = {}, None
    for k, line in enumerate(lines):
        if line.startswith(".TP") and k + 1 < len(lines):
            names = re.findall(r"--[a-z][a-z0-9-]*", unroff(lines[k + 1]))
            current = names
            for n in names:
                entries[n] = []
        elif current:
            for n in current:
                entries[n].append(unroff(line))
    return {n: " ".join(p) for n, p in entries.items()}


def click_options(command):
    cmd = main if command is None else main.commands[command]
    params = [p for p in cmd.params if isinstance(p, click.Option)]
    return params + [cmd.get_help_option(click.Context(cmd))]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_renders_without_warnings(page):
    if not shutil.which("groff"):
        pytest.skip("groff is not installed")
    result = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", os.path.join(MAN, page)],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_has_the_sections(page):
    names = set(sections(read(page)))
    assert {"NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLES", "SEE ALSO"} <= names
    if page.endswith(".1"):
        assert {"OPTIONS", "EXIT STATUS"} <= names


@pytest.mark.parametrize("page,command", [(p, c) for p, c in PAGES.items() if p.endswith(".1")])
def test_options_match_click(page, command):
    documented = documented_options(page)
    known = {name for p in click_options(command) for name in p.opts + p.secondary_opts
             if name.startswith("--")}
    assert set(documented) == known


@pytest.mark.parametrize("page,command", [(p, c) for p, c in PAGES.items() if c])
def test_defaults_match_click(page, command):
    documented = documented_options(page)
    for param in click_options(command):
        if not param.show_default or param.default is None:
            continue
        if param.is_flag and param.secondary_opts:
            shown = (param.opts if param.default else param.secondary_opts)[0].lstrip("-")
        else:
            shown = str(param.default)
        assert f"Default: {shown}" in documented[param.opts[0]], param.opts[0]


def example_commands(text):
    """Shell lines of the EXAMPLES .nf blocks (data lines excluded)."""
    commands, inside = [], False
    for line in sections(text)["EXAMPLES"]:
        if line.startswith(".nf"):
            inside = True
        elif line.startswith(".fi"):
            inside = False
        elif inside and not line.startswith(".") and not re.match(r"[-+0-9.]", unroff(line)):
            commands.append(unroff(line))
    return commands


def readme_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        blocks = re.findall(r"```sh\n(.*?)```", fh.read(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = re.sub(r"^python3 -m pip install [^&]*&& ", "", line.strip())
            if line and not line.startswith("python3 -m pip install"):
                commands.append(line)
    return commands


SHELL_SYNTAX = re.compile(r"[|<>;&$`]")


def run_in_samples_dir(tmp_path, commands, in_process=True):
    """Run each command in ``tmp_path`` (data_samples linked there). With ``in_process``, a
    plain ``rafm ...`` line runs in this process (click's runner: the same command without a
    Python start and numba's import, a second each); the others, and all without it, run in
    bash through the installed ``rafm`` script, its start, exit and lean numba included."""
    os.symlink(os.path.join(ROOT, "data_samples"), tmp_path / "data_samples")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for command in commands:
            words = shlex.split(command)
            if in_process and words[0] == "rafm" and not SHELL_SYNTAX.search(command):
                result = CliRunner().invoke(main, words[1:])
                assert result.exit_code == 0, (command, result.output[-2000:], result.exception)
                continue
            result = subprocess.run(["bash", "-o", "pipefail", "-ec", command], capture_output=True, text=True)
            assert result.returncode == 0, (command, result.stderr[-2000:])
    finally:
        os.chdir(here)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_examples_run(tmp_path, page):
    commands = example_commands(read(page))
    assert commands
    run_in_samples_dir(tmp_path, commands)


def test_readme_commands_run(tmp_path):
    """README's commands: the main job as a user runs it, a process through the installed
    ``rafm`` script; the others as the man pages' examples run (a pipeline in bash)."""
    commands = readme_commands()
    assert commands[0].startswith("rafm train")
    assert any("pytest" in c for c in commands)
    run_in_samples_dir(tmp_path, commands[:1], in_process=False)
    os.unlink(tmp_path / "data_samples")
    run_in_samples_dir(tmp_path, [c for c in commands[1:] if "pytest" not in c])
    assert (tmp_path / "predictions.txt").exists() and (tmp_path / "train-log.tsv").exists()


def test_ci_runs_readme_test_command():
    test_command = next(c for c in open(os.path.join(ROOT, "README.md")).read().split("```sh\n")
                        if "pytest" in c).split("```")[0].strip()
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        assert test_command in fh.read()


def test_per_method_defaults_are_the_table():
    """rafm-train(1) and --help give each method's learning rate and the race's L2 values and rate
    steps and AdaGrad's start from rafmcli/options.py (METHOD_DEFAULTS, L2_CHOICES, RATE_STEPS,
    ADAGRAD_START), the table the API
    reads too."""
    from rafmcli.options import ADAGRAD_START, L2_CHOICES, RATE_STEPS, method_default

    documented = documented_options("rafm-train.1")
    helped = " ".join(CliRunner().invoke(main, ["train", "--help"]).output.split())
    for method in ("sgd", "adagrad", "adam", "sgda"):
        rate = f"{method_default(method, 'learn_rate'):g} for {method}"
        assert rate in documented["--learn-rate"] and rate in helped
    assert ", ".join(f"{c:g}" for c in L2_CHOICES[:-1]) + f" and {L2_CHOICES[-1]:g}" in documented["--regular"]
    assert ",".join(f"{c:g}" for c in L2_CHOICES) in helped
    for method, steps in RATE_STEPS.items():  # the learning rates raced with the L2
        shown = ", ".join(f"{s:g}" for s in steps[:-1]) + f" and {steps[-1]:g} times"
        assert shown in " ".join(documented["--learn-rate"].split()) and method in documented["--learn-rate"]
        assert ",".join(f"{s:g}" for s in steps) + " times for" in helped
    assert f"gradients start at {ADAGRAD_START:g}," in " ".join(documented["--method"].split())
