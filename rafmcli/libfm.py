"""libFM command lines in rafm's terms: ``-task r -train F -dim '1,1,8' ...`` -> ``rafm train`` arguments.

libFM's meaning and defaults (libFM 1.4.4, src/libfm/libfm.cpp): ``-dim
'k0,k1,k'`` switches the bias and the linear weights and sets the rank
(default 1,1,8); ``-regular`` is one value for all three or r0,r1,r2
(default 0); ``-init_stdev`` 0.1; ``-learn_rate`` 0.1; ``-iter`` 100; no
hold-out and no early stopping; ``-validation`` for sgda only; ``-save_model`` and ``-load_model`` are
text models in libFM's layout. Options are ``-name value`` or
``--name value``; lists are separated by commas or semicolons.
"""

import re
from dataclasses import dataclass, field

# libFM's defaults where they differ from rafm train's (the rest are rafm's, see rafmcli/options.py)
LIBFM_DEFAULTS = {"dim": "1,1,8", "iter": "100", "learn_rate": "0.1", "init_stdev": "0.1", "regular": "0"}
WITH_VALUE = ("task", "train", "test", "validation", "dim", "iter", "method", "learn_rate", "regular",
              "init_stdev", "meta", "out", "rlog", "save_model", "load_model", "seed", "verbosity",
              "cache_size", "relation")
FLAGS = ("help",)
# unused by -iter 0
TRAINING_ONLY = ("method", "validation", "learn_rate", "regular", "init_stdev", "meta", "rlog", "seed")
LIBFM_METHODS = ("sgd", "sgda", "als", "mcmc")
DIRECT = {"train": "--train", "test": "--test", "validation": "--validation", "out": "--out",
          "rlog": "--rlog", "seed": "--seed", "iter": "--iter", "init_stdev": "--init-stdev",
          "save_model": "--dump-model", "load_model": "--init-model"}


class LibfmError(ValueError):
    """A libFM command line rafm cannot run: the message says why and what to do."""


@dataclass
class Translation:
    """``rafm train`` arguments for a libFM command line (or, -iter 0, predict_only's), and one-line
    notes for stderr."""

    train_args: list
    notes: list = field(default_factory=list)
    help: bool = False
    predict_only: bool = False  # -iter 0: train_args are rafmcli.cli.libfm.predict_only's


def split_list(text):
    return [t for t in re.split(r"[;,]", text.strip().strip("'\"")) if t != ""]


def parse(argv):
    """{name: value} of a libFM argument list; LibfmError for what libFM would not take."""
    values, k = {}, 0
    while k < len(argv):
        token = argv[k]
        name = token[2:] if token.startswith("--") else token[1:] if token.startswith("-") else None
        if not name:
            raise LibfmError(f"{token}: libFM options start with '-' (-task r -train FILE ...)")
        if name in FLAGS:
            values[name] = True
            k += 1
            continue
        if name not in WITH_VALUE:
            raise LibfmError(f"-{name}: not a libFM option (libFM takes {', '.join('-' + n for n in WITH_VALUE)})")
        if k + 1 >= len(argv):
            raise LibfmError(f"-{name} needs a value")
        values[name] = argv[k + 1]
        k += 2
    return values


def translate(argv):
    """The ``rafm train`` arguments that run ``libFM argv`` with libFM's meaning."""
    values = parse(argv)
    if values.get("help"):
        return Translation([], help=True)
    if "relation" in values:
        raise LibfmError("-relation (libFM's block structure) is not supported: write the related features "
                         "into each row of the libFM files instead")
    for required in ("task", "train"):
        if required not in values:
            raise LibfmError(f"-{required} is required (libFM: -task r|c -train FILE -test FILE)")
    if values["task"] not in ("r", "c"):
        raise LibfmError(f"-task {values['task']}: libFM's tasks are r (regression) and c (classification)")
    notes = []
    given = dict(values)
    values = {**LIBFM_DEFAULTS, **values}
    method = values.get("method", "mcmc").lower()
    if method not in LIBFM_METHODS:
        raise LibfmError(f"-method {method}: libFM's methods are {', '.join(LIBFM_METHODS)}")
    args = ["--task", values["task"], "--model", "fm", "--method", method, "--holdout", "0"]
    if method != "mcmc":
        args += ["--early-stop", "0"]
    dim = split_list(values["dim"])
    if len(dim) != 3 or not all(d.isdigit() for d in dim):
        raise LibfmError(f"-dim {values['dim']}: expected 'k0,k1,k' (bias 0/1, linear 0/1, rank)")
    if int(dim[2]) < 1:
        raise LibfmError(f"-dim {values['dim']}: rafm has no rank-0 model; for libFM's linear model give -dim "
                         f"'{dim[0]},{dim[1]},1' -init_stdev 0 with -method sgd, sgda or als (factors that start "
                         f"at 0 stay 0; mcmc draws them)")
    args += ["--bias" if int(dim[0]) else "--no-bias", "--linear" if int(dim[1]) else "--no-linear",
             "--dim", dim[2]]
    if "verbosity" in given and not given["verbosity"].lstrip("-").isdigit():
        raise LibfmError(f"-verbosity {given['verbosity']}: expected an integer")
    if "cache_size" in given and not given["cache_size"].isdigit():
        raise LibfmError(f"-cache_size {given['cache_size']}: expected an integer (rafm does not need it)")
    if values["iter"].isdigit() and int(values["iter"]) == 0:  # no training: -method has no say
        return _predict_only(given, dim[2])
    reg = split_list(values["regular"])
    if len(reg) == 1:
        reg = reg * 3
    if len(reg) != 3 and not (method == "als" and "meta" in given):
        raise LibfmError(f"-regular {values['regular']}: expected one value or r0,r1,r2"
                         + (" (or r0,r1_1..r1_G,r2_1..r2_G with -meta)" if method == "als" else ""))
    if method == "sgda" and "validation" not in given:
        raise LibfmError("-method sgda learns its regularisation on -validation FILE: give one (libFM needs it too)")
    if method in ("mcmc", "sgda"):
        if "regular" in given:
            notes.append(f"-regular: {method} learns its regularisation; the values are not used")
    elif method == "als" and "regular" not in given:
        pass  # rafm's ALS defaults (libFM's manual: -regular '0,0,10' and the like)
    else:
        args += ["--regular", ",".join(reg)]
    if method in ("sgd", "sgda"):
        rates = split_list(values["learn_rate"])
        if len(rates) not in (1, 3):
            raise LibfmError(f"-learn_rate {values['learn_rate']}: expected one value or three")
        if len(set(rates)) > 1:
            raise LibfmError(f"-learn_rate {values['learn_rate']}: rafm has one learning rate for bias, linear "
                             f"and pairwise parameters; give one value")
        args += ["--learn-rate", rates[0]]
    elif "learn_rate" in given:
        notes.append(f"-learn_rate: -method {method} has no learning rate; the value is not used")
    if method == "mcmc":
        for name in ("save_model", "load_model"):
            if name in given:
                raise LibfmError(f"-{name}: libFM's text model holds one sample, an MCMC model all of them: "
                                 f"use rafm train --method mcmc --save-model FILE (libFM ignores -{name} with mcmc)")
    if "meta" in given:
        if method == "sgd":
            notes.append("-meta: libFM's groups are used by -method mcmc and als only; -method sgd ignores them")
        else:
            args += ["--meta", given["meta"]] + (["--group-precision"] if method == "mcmc" else [])
    elif method != "sgd":
        args += ["--no-auto-groups"]  # libFM without -meta: one group (a libFFM file's fields still are groups)
    if "validation" in given and method != "sgda":
        del values["validation"]
        notes.append("-validation: libFM uses it for -method sgda only; the file is not used")
    for name, option in DIRECT.items():
        if name in values:
            args += [option, values[name]]
    return Translation(args, notes)


def _predict_only(given, rank):
    """-iter 0 -load_model M: libFM's way to apply a saved model; ``predict_only`` arguments, no training."""
    if "load_model" not in given:
        raise LibfmError("-iter 0 predicts -test with the model of -load_model FILE: give one (rafm does not "
                         "predict with an untrained model)")
    if "test" not in given:
        raise LibfmError("-iter 0 -load_model FILE predicts -test FILE: give one")
    args = ["--task", given["task"], "--train", given["train"], "--test", given["test"],
            "--init-model", given["load_model"], "--dim", rank]
    for name in ("out", "save_model"):
        if name in given:
            args += [DIRECT[name], given[name]]
    unused = [f"-{name}" for name in TRAINING_ONLY if name in given]
    return Translation(args, ["-iter 0: no training, -test is predicted with the model of -load_model"
                              + (f"; {', '.join(unused)} not used" if unused else "")], predict_only=True)


def looks_like_libfm(args):
    """The first single-dash libFM option among ``args`` (``-task``), or None."""
    for token in args:
        if token.startswith("-") and not token.startswith("--") and token[1:] in WITH_VALUE + FLAGS:
            return token
    return None
