"""Continuing training from a saved model (``rafm train --init-model``, the API's warm start).

A model continues only as what it is: the same task, the same kind and the
same ranks (its levels and factor blocks are laid out for them). What the
caller did not ask for explicitly is taken from the model.
"""

from rafmcli.errors import InputError

_TASKS = {"r": "regression", "c": "classification", "implicit": "implicit data"}


def trained_settings(model, method):
    """(learning rate, (reg_bias, reg_linear, *reg_factors)) ``model`` was trained with, each
    None where its file does not say or it was trained by another method: what a continuation
    keeps unless the caller gives its own."""
    saved = (model.info or {}).get("options") or {}
    if saved.get("method") != method:
        return None, None
    rate = float(saved["learn_rate"]) if isinstance(saved.get("learn_rate"), (int, float)) else None
    regular = None
    if all(k in saved for k in ("reg_bias", "reg_linear", "reg_factors")):
        factors = saved["reg_factors"] if isinstance(saved["reg_factors"], (list, tuple)) else [saved["reg_factors"]]
        regular = (saved["reg_bias"], saved["reg_linear"], *factors)
    return rate, regular


def settle(model, source, task, kind=None, ranks=None):
    """(kind, ranks) to continue ``model`` with; InputError (exit 2) when a given one differs.

    ``kind`` and ``ranks`` are None when the caller left them to the model.
    """
    if model.task is not None and model.task != task:  # None: a libFM text model, task unknown
        raise InputError(f"{source}: a {_TASKS.get(model.task, model.task)} model cannot continue as "
                         f"{_TASKS.get(task, task)} (--task {model.task})")
    if kind is not None and kind != model.kind:
        raise InputError(f"{source}: a {model.kind} model cannot continue as {kind} (--model {model.kind})")
    if ranks is not None and tuple(ranks) != tuple(model.ranks):
        shown = ",".join(map(str, model.ranks))
        raise InputError(f"{source}: its ranks are {shown}, not {','.join(map(str, ranks))} (--ranks {shown})")
    model.task = task
    return model.kind, tuple(model.ranks)
