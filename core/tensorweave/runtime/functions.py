"""Graph functions, run-time side: instantiating a FunctionDef (``framework/function.py``) on a
device and calling it.

``Function(definition, device, resources, session)`` imports the body into a private graph
(every node goes through the op registry, as for any received GraphDef), keeps the nodes the
outputs need, and compiles them once with the executor's ``CompiledPartition`` — the same
compiled form a Session runs — with the function's inputs as feeds and its outputs as
fetches. A call is then one run of that partition: ``fn(values) -> outputs``. Calls may come
from several threads at once (a parallel ``map``); each call has its own value slots.

Kernels of the body are built for this instantiation only (a private kernel cache), so a
stateful op in a function (a random op) keeps its own state, apart from the caller's graph.
Everything runs on the one device the calling kernel runs on: a function is not placed or
partitioned.
"""

from __future__ import annotations

import itertools

import numpy as np

from tensorweave import plugins
from tensorweave.framework import errors
from tensorweave.framework.function import parse_function_def
from tensorweave.framework.graph import Graph
from tensorweave.framework.importer import import_graph_def
from tensorweave.framework.tensor_shape import TensorShape
from tensorweave.passes.prune import prune
from tensorweave.runtime.executor import CompiledPartition
from tensorweave.runtime.step import StepContext, enter_loop, in_loop, leave_loop

_call_ids = itertools.count(1)


class Function:
    """An instantiated graph function: ``fn(inputs) -> list of output values``.

    ``what`` names the caller in error messages (``"MapDataset 'map'"``); ``pool`` is a
    callable returning a thread pool, needed only by bodies with asynchronous kernels or
    control flow (they run on the dynamic executor).
    """

    def __init__(self, definition, device, resources, session=None, what: str = "", pool=None):
        fdef = parse_function_def(definition)
        self.name = fdef["name"]
        self.what = what or f"function '{self.name}'"
        g = Graph()
        try:
            with g.as_default():
                import_graph_def(fdef["graph"], name="")
            self.inputs = [g.get_tensor_by_name(n) for n in fdef["inputs"]]
            self.outputs = [g.get_tensor_by_name(n) for n in fdef["outputs"]]
        except errors.OpError as e:
            raise type(e)(f"{self.what}: cannot build its function '{self.name}': {e.message}") from None
        self.graph = g
        self.output_dtypes = [t.dtype for t in self.outputs]
        self.output_shapes = [t.shape for t in self.outputs]
        self.device = device
        self.session = session
        self._pool = pool
        nodes = prune(self.outputs, [], self.inputs)
        try:
            self.part = CompiledPartition(nodes, self.inputs, self.outputs, device, plugins.registry().kernels,
                                          resources, {}, session)
        except errors.OpError as e:
            raise type(e)(f"{self.what}: cannot run its function '{self.name}' on {device.name}: {e.message}",
                          node_def=None) from None
        self._dynamic = self.part.has_async

    def __call__(self, values) -> list:
        step = StepContext(next(_call_ids), None, None, self.session)
        if not self._dynamic and not getattr(in_loop, "active", False):
            try:  # the common case: a flat body, called outside any executor loop
                return self.part.run_sequential(values, step)
            except errors.OpError as e:
                raise self._error(e) from None
        # The caller may itself be running inside an executor loop (a GetNext kernel on the
        # dynamic executor): the function's executor is a loop of its own, not a continuation
        # of the caller's.
        outer = enter_loop(None, None)
        leave_loop((False, None, None))
        try:
            if self._dynamic:
                pool = self._pool() if self._pool is not None else None
                if pool is None:
                    raise errors.FailedPreconditionError(
                        f"{self.what}: function '{self.name}' needs a thread pool to run and none is available")
                return self.part.run_dynamic(values, step, pool, None)
            return self.part.run_sequential(values, step)
        except errors.OpError as e:
            raise self._error(e) from None
        finally:
            leave_loop(outer)

    def _error(self, e: errors.OpError) -> errors.OpError:
        return type(e)(f"{self.what}: in its function '{self.name}': {e.message}")

    def output_checker(self, declared_dtypes, declared_shapes):
        """``check(values) -> tuple of ndarrays``: outputs must have the dtypes and shapes the
        caller declared when it was built (the function's, when it was traced); anything else
        is an InvalidArgumentError naming the caller and the component."""
        spec = [(np.dtype(object) if dt.is_string else dt.np_dtype, dt, shape.as_tuple())
                for dt, shape in zip(declared_dtypes, declared_shapes)]

        def check(values) -> tuple:
            out = []
            for i, (v, (want, dt, dims)) in enumerate(zip(values, spec)):
                if type(v) is not np.ndarray:
                    v = np.asarray(v, dtype=want if dt.is_string else None)
                if v.dtype != want:
                    raise errors.InvalidArgumentError(
                        f"{self.what}: its function '{self.name}' returned a {v.dtype} value for component {i}, "
                        f"where {dt.name} was expected")
                if dims is not None:
                    shp = v.shape
                    if len(shp) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shp)):
                        raise errors.InvalidArgumentError(
                            f"{self.what}: its function '{self.name}' returned a value of shape {tuple(shp)} for "
                            f"component {i}, where shape {TensorShape(dims)} was expected (the shape the function "
                            "had when it was traced)")
                out.append(v)
            return tuple(out)
        return check
