"""The global step: an int64 scalar variable named ``global_step``, kept in the
``GLOBAL_STEP`` collection, that ``Optimizer.minimize(global_step=...)`` increments once per
training step."""

from __future__ import annotations

from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import GraphKeys, Tensor, get_default_graph
from tensorweave.ops import init_ops
from tensorweave.ops import variable_scope as vs
from tensorweave.ops.variables import Variable


def assert_global_step(global_step_tensor):
    """Raise InvalidArgumentError unless ``global_step_tensor`` is an integer scalar variable."""
    t = global_step_tensor
    is_ref = isinstance(t, Tensor) and t.op.op_def.outputs_ref
    if not (isinstance(t, Variable) or is_ref):
        raise errors.InvalidArgumentError(
            f"the global step must be a variable (e.g. tw.train.get_or_create_global_step()), got "
            f"{getattr(t, 'name', repr(t))}")
    if not t.dtype.is_integer:
        raise errors.InvalidArgumentError(
            f"the global step '{t.name}' must have an integer dtype, got {t.dtype.name}")
    if t.shape.ndims not in (None, 0):
        raise errors.InvalidArgumentError(f"the global step '{t.name}' must be a scalar, got shape {t.shape}")


def get_global_step(graph=None):
    """The global step variable of ``graph`` (default: the default graph), or None."""
    graph = graph if graph is not None else get_default_graph()
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        raise errors.InvalidArgumentError(
            f"the GLOBAL_STEP collection holds {len(found)} items ({[getattr(v, 'name', v) for v in found]}); "
            "there must be at most one global step")
    if found:
        step = found[0]
    else:
        try:
            step = graph.get_tensor_by_name("global_step:0")
        except errors.NotFoundError:
            return None
    assert_global_step(step)
    return step


def create_global_step(graph=None):
    """Create the global step variable (int64, initialised to 0, not trainable); an error
    if it exists."""
    graph = graph if graph is not None else get_default_graph()
    if get_global_step(graph) is not None:
        raise errors.InvalidArgumentError('"global_step" already exists.')
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
            vs.variable_scope(vs.VariableScope(False), auxiliary_name_scope=False):
        return vs.get_variable(GraphKeys.GLOBAL_STEP, shape=[], dtype=dtypes.int64,
                               initializer=init_ops.zeros_initializer(), trainable=False,
                               collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph=None):
    """The global step variable of ``graph``, created if there is none."""
    graph = graph if graph is not None else get_default_graph()
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess, global_step_tensor):
    """The current value of the global step, as a Python int."""
    return int(sess.run(global_step_tensor))
