"""``tw.contrib.framework``: ``arg_scope``/``add_arg_scope``, the global step and variable
queries TF1 programs import from ``tf.contrib.framework`` (and ``tf.contrib.slim``).

``arg_scope([f, g], **defaults)`` sets default keyword arguments for the functions listed,
inside the ``with`` block (nested scopes merge, the inner one wins; arguments passed in a
call win over both). Only functions decorated with ``add_arg_scope`` may be listed; the
``tw.contrib.layers`` functions are. The scope stack is per thread.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading

from tensorweave.framework import errors
from tensorweave.framework.graph import GraphKeys, get_default_graph
from tensorweave.ops import variable_scope as vs
from tensorweave.train.training_util import (
    assert_global_step,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)

__all__ = [
    "arg_scope", "add_arg_scope", "has_arg_scope", "arg_scoped_arguments", "current_arg_scope",
    "get_or_create_global_step", "get_global_step", "create_global_step", "assert_global_step",
    "get_variables", "get_model_variables", "get_trainable_variables", "get_local_variables",
    "get_variables_by_name", "get_variables_by_suffix", "get_unique_variable", "get_variables_to_restore",
    "model_variable", "variable",
]

_local = threading.local()
_DECORATED: set = set()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = [{}]
    return _local.stack


def current_arg_scope() -> dict:
    """The arguments in force: ``{(module, function name): {argument: value}}``."""
    return _stack()[-1]


def _key(func):
    return getattr(func, "_arg_scope_key", (getattr(func, "__module__", None), getattr(func, "__name__", repr(func))))


def _name(func):
    return getattr(func, "__name__", repr(func))


def add_arg_scope(func):
    """Decorate ``func`` so that ``arg_scope`` can give it default keyword arguments."""
    key = _key(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        defaults = current_arg_scope().get(key)
        if defaults:
            kwargs = {**defaults, **kwargs}
        return func(*args, **kwargs)

    wrapper._arg_scope_key = key
    _DECORATED.add(key)
    return wrapper


def has_arg_scope(func) -> bool:
    return _key(func) in _DECORATED


def arg_scoped_arguments(func):
    """The names of the arguments ``func`` accepts (those arg_scope may set)."""
    return list(inspect.signature(func).parameters)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs):
    """Default ``kwargs`` for every function in ``list_ops_or_scope`` (a list or tuple of
    ``add_arg_scope`` functions), or re-enter a scope captured earlier (the dict this
    yields; then no ``kwargs``)."""
    if isinstance(list_ops_or_scope, dict):
        if kwargs:
            raise errors.InvalidArgumentError(
                "arg_scope: when re-entering a scope given as a dict, no keyword arguments may be passed")
        current = {k: dict(v) for k, v in list_ops_or_scope.items()}
    else:
        if not isinstance(list_ops_or_scope, list | tuple):
            raise TypeError("arg_scope: list_ops_or_scope must be a list/tuple of functions or a scope (dict), "
                            f"got {list_ops_or_scope!r}")
        current = {k: dict(v) for k, v in current_arg_scope().items()}
        for op in list_ops_or_scope:
            if not has_arg_scope(op):
                raise errors.InvalidArgumentError(
                    f"arg_scope: {_name(op)} is not decorated with @add_arg_scope (tw.contrib.framework.add_arg_scope)")
            key = _key(op)
            current[key] = {**current.get(key, {}), **kwargs}
    stack = _stack()
    stack.append(current)
    try:
        yield current
    finally:
        stack.pop()


# ---------------------------------------------------------------------------------------
# variables
def _scope_name(scope):
    return scope.name if isinstance(scope, vs.VariableScope) else scope


def get_variables(scope=None, suffix=None, collection=GraphKeys.GLOBAL_VARIABLES):
    """Variables in ``collection`` whose names start with ``scope`` (a name, regex or
    VariableScope) and end with ``suffix``."""
    scope = _scope_name(scope)
    if suffix is not None:
        if ":" not in suffix:
            suffix += ":"
        scope = (scope or "") + ".*" + suffix
    return get_default_graph().get_collection(collection, scope)


def get_model_variables(scope=None, suffix=None):
    """Variables in ``GraphKeys.MODEL_VARIABLES`` (those the contrib layers create)."""
    return get_variables(scope, suffix, GraphKeys.MODEL_VARIABLES)


def get_trainable_variables(scope=None, suffix=None):
    return get_variables(scope, suffix, GraphKeys.TRAINABLE_VARIABLES)


def get_local_variables(scope=None, suffix=None):
    return get_variables(scope, suffix, GraphKeys.LOCAL_VARIABLES)


def get_variables_by_suffix(suffix, scope=None):
    return get_variables(scope=scope, suffix=suffix)


def get_variables_by_name(given_name, scope=None):
    """Variables whose last name component is ``given_name``."""
    return get_variables(scope=scope, suffix="/" + given_name)


def get_unique_variable(var_op_name):
    """The one variable named ``var_op_name`` (without ``:0``)."""
    found = [v for v in get_variables(var_op_name) if v.op.name == var_op_name]
    if not found:
        raise errors.InvalidArgumentError(f"get_unique_variable: no variable named {var_op_name!r}")
    return found[0]


def get_variables_to_restore(include=None, exclude=None):
    """Global variables under any scope in ``include`` (default all) and none in ``exclude``."""
    if include is None:
        candidates = get_variables()
    else:
        candidates = []
        for scope in include:
            candidates.extend(v for v in get_variables(scope) if v not in candidates)
    excluded = set()
    for scope in exclude or ():
        excluded.update(get_variables(scope))
    return [v for v in candidates if v not in excluded]


def variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True, collections=None,
             device=None, **_):
    """``get_variable`` that is always in GLOBAL_VARIABLES (plus ``collections``), on ``device``."""
    collections = list(collections or [])
    if GraphKeys.GLOBAL_VARIABLES not in collections:
        collections.append(GraphKeys.GLOBAL_VARIABLES)
    g = get_default_graph()
    with g.device(device) if device else contextlib.nullcontext():
        return vs.get_variable(name, shape=shape, dtype=dtype, initializer=initializer, regularizer=regularizer,
                               trainable=trainable, collections=collections)


def model_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                   collections=None, device=None, **kwargs):
    """A ``variable`` also in ``GraphKeys.MODEL_VARIABLES``."""
    collections = list(collections or [])
    if GraphKeys.MODEL_VARIABLES not in collections:
        collections.append(GraphKeys.MODEL_VARIABLES)
    return variable(name, shape=shape, dtype=dtype, initializer=initializer, regularizer=regularizer,
                    trainable=trainable, collections=collections, device=device)


variable = add_arg_scope(variable)
model_variable = add_arg_scope(model_variable)
