"""``tw.contrib``: the parts of ``tf.contrib`` that TF1 programs commonly import and that
tensorweave implements: ``layers``, ``framework``, ``learn.datasets``, ``training``'s ps
strategies, ``opt.LazyAdamOptimizer`` and ``rnn`` (the cells of ``tw.nn.rnn_cell``,
``static_rnn``, ``dynamic_rnn``).

Anything else fails clearly: ``tw.contrib.slim`` raises an ``AttributeError`` and
``import tensorweave.contrib.slim`` a ``ModuleNotFoundError``, both saying that
``tf.contrib.slim`` is not provided by tensorweave.
"""

from __future__ import annotations

import importlib.abc
import sys

from tensorweave.contrib import framework, layers, learn, opt, rnn, training

__all__ = ["framework", "layers", "learn", "opt", "rnn", "training"]


def _not_provided(name):
    return (f"tf.contrib.{name} is not provided by tensorweave (tw.contrib has: {', '.join(__all__)}; "
            "see docs/tf1.md)")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(_not_provided(name))


class _NotProvidedFinder(importlib.abc.MetaPathFinder):
    """Consulted after the real finders: an import of a ``tensorweave.contrib`` submodule
    that does not exist gets a message naming it, not a bare "No module named"."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = __name__ + "."
        if fullname.startswith(prefix):
            # name=None: "from tensorweave.contrib import x" must not swallow this for a plain
            # "cannot import name" (it does when the error names the module it looked for).
            raise ModuleNotFoundError(_not_provided(fullname[len(prefix):]), name=None)
        return None


if not any(isinstance(f, _NotProvidedFinder) for f in sys.meta_path):
    sys.meta_path.append(_NotProvidedFinder())
