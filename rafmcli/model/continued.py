"""Continuing training from a saved model (``rafm train --init-model``, the API's warm start).

A model continues only as what it is: the same task, the same kind and the
same ranks (its levels and factor blocks are laid out for them). What the
caller did not ask for explicitly is taken from the model.
"""

from rafmcli.errors import InputError

_TASKS = {"r": "regression", "c": "classification", "implicit": "implicit data"}


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
