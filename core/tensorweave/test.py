"""``tw.test``: TF1's test helpers: ``TestCase``, ``main``, GPU queries, temporary
directories and ``compute_gradient``/``compute_gradient_error``.

``TestCase`` is a ``unittest.TestCase`` that, like TF1's, starts every test on a fresh
default graph (``setUp`` resets it and seeds NumPy), and gives sessions:

- ``self.session()``: a new Session on the default graph, made the default session (so
  ``t.eval()`` works) with ops created inside pinned to the CPU unless ``use_gpu=True``
  (``force_gpu=True`` pins them to the GPU);
- ``self.cached_session()``: one Session per test, reused; ``self.test_session()``, the
  TF1 name, is the same (or a new Session when given another ``graph``).

Assertions take NumPy values, nested lists/tuples/dicts of them, or Tensors (evaluated in
the default session): ``assertAllClose``, ``assertAllEqual`` (shapes must match, NaN equals
NaN), ``assertAllCloseAccordingToType`` (looser for float32 and float16),
``assertShapeEqual``, ``assertNear``, ``assertArrayNear``, ``assertAllGreater``/``Less``/
``InRange``/``InSet``, ``assertDTypeEqual``, ``assertRaisesOpError``.
"""

from __future__ import annotations

import atexit
import collections.abc
import contextlib
import dataclasses
import math
import re
import shutil
import tempfile
import unittest

import numpy as np

from tensorweave import plugins
from tensorweave.client.session import Session
from tensorweave.framework import dtypes, errors
from tensorweave.framework.graph import Tensor, get_default_session, reset_default_graph
from tensorweave.framework.indexed_slices import IndexedSlicesValue
from tensorweave.ops import array_ops
from tensorweave.ops import gradients as gradients_mod
from tensorweave.ops.variables import Variable
from tensorweave.runtime.config import ConfigProto

__all__ = ["TestCase", "main", "is_gpu_available", "gpu_device_name", "is_built_with_cuda",
           "is_built_with_gpu_support", "get_temp_dir", "compute_gradient", "compute_gradient_error"]

_DEFAULT_SEED = 87654321  # TF1's default graph seed, which its TestCase seeds NumPy with
_base_temp_dir = None


def get_temp_dir():
    """A directory for this process's test files, deleted when the process exits."""
    global _base_temp_dir
    if _base_temp_dir is None:
        _base_temp_dir = tempfile.mkdtemp(prefix="tensorweave_test_")
        atexit.register(shutil.rmtree, _base_temp_dir, ignore_errors=True)
    return _base_temp_dir


def main(argv=None):
    """Run the ``unittest`` tests of the ``__main__`` module (exits with their status)."""
    return unittest.main(module="__main__", argv=argv)


def _gpu_factory():
    return dict(plugins.registry().device_factories.items()).get("GPU")


def is_built_with_cuda():
    """Whether the CUDA device plugin (``tensorweave-cuda``) is installed and loaded."""
    return any(p.name == "cuda" and p.status == "loaded" for p in plugins.registry().plugins)


is_built_with_gpu_support = is_built_with_cuda


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    """Whether a CUDA GPU device is present (the CUDA plugin registers GPU devices only when
    it finds one). ``min_cuda_compute_capability`` is accepted and not checked."""
    factory = _gpu_factory()
    if factory is None:
        return False
    try:
        return factory.count() > 0
    except Exception:  # a driver that cannot enumerate means no usable GPU
        return False


def gpu_device_name():
    """``"/device:GPU:0"`` when a GPU is available, else ``""``."""
    return "/device:GPU:0" if is_gpu_available() else ""


def _session_config(config, force_gpu):
    """As TF1's TestCase: soft placement unless a GPU is forced, so ``use_gpu=True`` tests
    also run on machines without one (the caller's config is not modified)."""
    cfg = ConfigProto() if config is None else config
    return dataclasses.replace(cfg, allow_soft_placement=not force_gpu)


class _not_a_test:  # noqa: N801 - used as a decorator
    """A method whose name starts with ``test`` that unittest (and pytest) must not collect
    as a test: its class attribute is not callable, its bound method is."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        return self if obj is None else self.fn.__get__(obj, cls)


class TestCase(unittest.TestCase):
    """Base class for tests of graphs (see the module docstring)."""

    def __init__(self, methodName="runTest"):  # noqa: N803 - unittest's name
        super().__init__(methodName)
        self._cached_session = None
        self._tempdir = None

    def setUp(self):
        self._clear_cached_session()
        np.random.seed(_DEFAULT_SEED)
        reset_default_graph()

    def tearDown(self):
        self._clear_cached_session()

    def _clear_cached_session(self):
        if self._cached_session is not None:
            self._cached_session.close()
            self._cached_session = None

    def get_temp_dir(self):
        """A directory of this test's own (under ``tw.test.get_temp_dir()``)."""
        if self._tempdir is None:
            self._tempdir = tempfile.mkdtemp(dir=get_temp_dir())
        return self._tempdir

    # -- sessions ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _constrained(self, sess, use_gpu, force_gpu):
        with sess.graph.as_default(), sess.as_default():
            if force_gpu:
                with sess.graph.device(gpu_device_name() or "/device:GPU:0"):
                    yield sess
            elif use_gpu:
                yield sess
            else:
                with sess.graph.device("/device:CPU:0"):
                    yield sess

    @contextlib.contextmanager
    def session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """A new Session on ``graph`` (default: the default graph), as the default session."""
        sess = Session(graph=graph, config=_session_config(config, force_gpu))
        try:
            with self._constrained(sess, use_gpu, force_gpu):
                yield sess
        finally:
            sess.close()

    @contextlib.contextmanager
    def cached_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """This test's one Session (created on first use), as the default session."""
        if self._cached_session is None:
            self._cached_session = Session(graph=graph, config=_session_config(config, force_gpu))
        elif graph is not None and self._cached_session.graph is not graph:
            raise errors.InvalidArgumentError(
                "cached_session: the graph differs from the one the cached session was made for; use "
                "self.session(graph=...) for another graph")
        with self._constrained(self._cached_session, use_gpu, force_gpu):
            yield self._cached_session

    @_not_a_test
    def test_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """TF1's name: ``cached_session()``, or a new Session for another ``graph``."""
        if graph is None or (self._cached_session is not None and graph is self._cached_session.graph):
            return self.cached_session(graph, config, use_gpu, force_gpu)
        return self.session(graph, config, use_gpu, force_gpu)

    def evaluate(self, tensors):
        """The values of ``tensors`` (any fetch structure) in the default session."""
        sess = get_default_session()
        if sess is None:
            with self.test_session() as sess:
                return sess.run(tensors)
        return sess.run(tensors)

    # -- values ------------------------------------------------------------------------
    def _nd(self, a):
        if isinstance(a, Tensor | Variable):
            a = self.evaluate(a)
        return a if isinstance(a, np.ndarray) else np.array(a)

    def _assert_array_close(self, a, b, rtol, atol, msg):
        a, b = self._nd(a), self._nd(b)
        self.assertEqual(a.shape, b.shape, f"Shape mismatch: expected {a.shape}, got {b.shape}. {msg or ''}")
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            if a.dtype == np.float16 or b.dtype == np.float16:
                rtol, atol = max(rtol, 1e-3), max(atol, 1e-3)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=msg or "")
        else:
            np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind in "iub" else a,
                                       b.astype(np.float64) if b.dtype.kind in "iub" else b,
                                       rtol=rtol, atol=atol, err_msg=msg or "")

    def _assert_close_recursive(self, a, b, rtol, atol, path, msg):
        where = "".join(f"[{p!r}]" for p in path)
        a_is_map, b_is_map = isinstance(a, collections.abc.Mapping), isinstance(b, collections.abc.Mapping)
        if a_is_map != b_is_map:
            raise AssertionError(f"Can't compare a dict to a non-dict: a{where} vs b{where}. {msg or ''}")
        if a_is_map:
            self.assertEqual(set(a), set(b), f"mismatched keys: a{where} has {sorted(map(repr, a))}, b{where} has "
                                             f"{sorted(map(repr, b))}. {msg or ''}")
            for k in a:
                self._assert_close_recursive(a[k], b[k], rtol, atol, path + [k], msg)
            return
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            try:
                a_arr, b_arr = np.array(a), np.array(b)
                if a_arr.dtype == object or b_arr.dtype == object:
                    raise ValueError("ragged")
            except (ValueError, TypeError):
                if len(a) != len(b):
                    raise AssertionError(f"Mismatched length: a{where} has {len(a)} items, but b{where} has {len(b)} "
                                         f"items. {msg or ''}") from None
                for i, (x, y) in enumerate(zip(a, b)):
                    self._assert_close_recursive(x, y, rtol, atol, path + [i], msg)
                return
            self._assert_array_close(a_arr, b_arr, rtol, atol, f"Mismatched value: a{where} is different from "
                                                               f"b{where}. {msg or ''}")
            return
        self._assert_array_close(a, b, rtol, atol, f"Mismatched value: a{where} is different from b{where}. "
                                                   f"{msg or ''}")

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):  # noqa: N802 - unittest style
        """``|a - b| <= atol + rtol |b|`` elementwise, shapes equal, NaN equal to NaN; ``a``
        and ``b`` may be nested lists, tuples and dicts."""
        self._assert_close_recursive(a, b, rtol, atol, [], msg)

    def assertAllCloseAccordingToType(self, a, b, rtol=1e-6, atol=1e-6, float_rtol=1e-6, float_atol=1e-6,  # noqa: N802
                                      half_rtol=1e-3, half_atol=1e-3, bfloat16_rtol=1e-2, bfloat16_atol=1e-2,
                                      msg=None):
        """``assertAllClose`` with tolerances at least ``float_*`` for float32/complex64 and
        ``half_*`` for float16 values."""
        a, b = self._nd(a), self._nd(b)
        kinds = {a.dtype, b.dtype}
        if kinds & {np.dtype(np.float32), np.dtype(np.complex64)}:
            rtol, atol = max(rtol, float_rtol), max(atol, float_atol)
        elif np.dtype(np.float16) in kinds:
            rtol, atol = max(rtol, half_rtol), max(atol, half_atol)
        self.assertAllClose(a, b, rtol=rtol, atol=atol, msg=msg)

    def assertAllEqual(self, a, b, msg=None):  # noqa: N802
        """Same shape and equal elements (NaN equals NaN)."""
        a, b = self._nd(a), self._nd(b)
        self.assertEqual(a.shape, b.shape, f"Shape mismatch: expected {a.shape}, got {b.shape}. {msg or ''}")
        same = a == b
        if a.dtype.kind in "fc" and b.dtype.kind in "fc":
            same = np.logical_or(same, np.logical_and(np.isnan(a), np.isnan(b)))
        if not np.all(same):
            np.testing.assert_array_equal(a, b, err_msg=msg or "")

    def assertShapeEqual(self, np_array, tf_tensor, msg=None):  # noqa: N802
        """The NumPy array's shape equals the tensor's static shape."""
        if not isinstance(np_array, np.ndarray | np.generic):
            raise TypeError(f"assertShapeEqual: np_array must be a NumPy ndarray or scalar, got {type(np_array)}")
        if not isinstance(tf_tensor, Tensor | Variable):
            raise TypeError(f"assertShapeEqual: tf_tensor must be a Tensor, got {type(tf_tensor)}")
        self.assertAllEqual(np.array(np_array.shape), np.array(tf_tensor.shape.as_list()), msg=msg)

    def assertNear(self, f1, f2, err, msg=None):  # noqa: N802
        self.assertTrue(f1 == f2 or math.fabs(f1 - f2) <= err, f"{f1} != {f2} +/- {err}{' ' + msg if msg else ''}")

    def assertArrayNear(self, farray1, farray2, err, msg=None):  # noqa: N802
        self.assertEqual(len(farray1), len(farray2), msg=msg)
        for f1, f2 in zip(farray1, farray2):
            self.assertNear(float(f1), float(f2), err, msg=msg)

    def assertNDArrayNear(self, ndarray1, ndarray2, err, msg=None):  # noqa: N802
        self.assertTrue(np.linalg.norm(np.asarray(ndarray1) - np.asarray(ndarray2)) < err, msg=msg)

    def assertAllGreater(self, a, comparison_target):  # noqa: N802
        self.assertGreater(np.min(self._nd(a)), comparison_target)

    def assertAllLess(self, a, comparison_target):  # noqa: N802
        self.assertLess(np.max(self._nd(a)), comparison_target)

    def assertAllGreaterEqual(self, a, comparison_target):  # noqa: N802
        self.assertGreaterEqual(np.min(self._nd(a)), comparison_target)

    def assertAllLessEqual(self, a, comparison_target):  # noqa: N802
        self.assertLessEqual(np.max(self._nd(a)), comparison_target)

    def assertAllInRange(self, target, lower_bound, upper_bound, open_lower_bound=False,  # noqa: N802
                         open_upper_bound=False):
        t = self._nd(target)
        low = t > lower_bound if open_lower_bound else t >= lower_bound
        high = t < upper_bound if open_upper_bound else t <= upper_bound
        bad = np.argwhere(~(low & high))
        if bad.size:
            raise AssertionError(f"{bad.shape[0]} elements are outside the range "
                                 f"{'(' if open_lower_bound else '['}{lower_bound}, {upper_bound}"
                                 f"{')' if open_upper_bound else ']'}, at indices {bad[:10].tolist()}")

    def assertAllInSet(self, target, expected_set):  # noqa: N802
        values = set(np.unique(self._nd(target)).tolist())
        extra = values - set(expected_set)
        if extra:
            raise AssertionError(f"values {sorted(extra)} are not in the expected set {sorted(set(expected_set))}")

    def assertDTypeEqual(self, target, expected_dtype):  # noqa: N802
        expected = dtypes.as_dtype(expected_dtype).np_dtype
        for arr in (target if isinstance(target, list) else [target]):
            self.assertEqual(self._nd(arr).dtype, expected)

    def assertRaisesOpError(self, expected_err_re_or_predicate):  # noqa: N802
        """A context manager: the block must raise a ``tw.errors.OpError`` whose message
        matches the regex (or satisfies the predicate)."""
        if callable(expected_err_re_or_predicate):
            return self.assertRaisesWithPredicateMatch(errors.OpError, expected_err_re_or_predicate)
        return self.assertRaisesRegex(errors.OpError, expected_err_re_or_predicate)

    @contextlib.contextmanager
    def assertRaisesWithPredicateMatch(self, exception_type, expected_err_re_or_predicate):  # noqa: N802
        if callable(expected_err_re_or_predicate):
            predicate = expected_err_re_or_predicate
        else:
            def predicate(e):
                return re.search(expected_err_re_or_predicate, str(e)) is not None
        try:
            yield
        except exception_type as e:
            if not predicate(e):
                raise AssertionError(f"exception {type(e).__name__}: {e} does not match "
                                     f"{expected_err_re_or_predicate!r}") from e
        else:
            raise AssertionError(f"{exception_type.__name__} not raised")


# ---------------------------------------------------------------------------------------
# gradient checks, TF1's signature: tensors x and y in the default graph and session
def _dense(value, shape) -> np.ndarray:
    """A fetched gradient as a dense array: an ``IndexedSlicesValue`` (a gather's gradient)
    is scattered, repeated indices adding up."""
    if isinstance(value, IndexedSlicesValue):
        out = np.zeros(shape, dtype=np.float64)
        np.add.at(out, np.asarray(value.indices), np.asarray(value.values, dtype=np.float64))
        return out
    return np.asarray(value)


def _jacobians(x_list, x_shapes, y, y_shape, x_inits, delta, extra_feed_dict):
    sess = get_default_session()
    if sess is None:
        raise errors.FailedPreconditionError(
            "tw.test.compute_gradient needs a default session (use it inside `with self.session():` or "
            "`with tw.Session().as_default():`)")
    y_size = int(np.prod(y_shape))
    feed = dict(extra_feed_dict or {})
    feed.update(zip(x_list, x_inits))
    dy = array_ops.placeholder(y.dtype, list(y_shape), name="compute_gradient_dy")
    grads = gradients_mod.gradients(y, x_list, grad_ys=dy)
    out = []
    for x, x_shape, x0 in zip(x_list, x_shapes, x_inits):
        x_size = int(np.prod(x_shape))
        theoretical = np.zeros((x_size, y_size))
        g = grads[x_list.index(x)]
        if g is not None:
            for j in range(y_size):
                one_hot = np.zeros(y_size, dtype=y.dtype.np_dtype)
                one_hot[j] = 1
                theoretical[:, j] = _dense(sess.run(g, {**feed, dy: one_hot.reshape(y_shape)}), x_shape).reshape(-1)
        numerical = np.zeros((x_size, y_size))
        flat = np.array(x0, dtype=x.dtype.np_dtype).reshape(-1)
        for i in range(x_size):
            values = []
            for sign in (1, -1):
                moved = flat.copy()
                moved[i] += sign * delta
                values.append(np.asarray(sess.run(y, {**feed, x: moved.reshape(x_shape)}), np.float64).reshape(-1))
            numerical[i] = (values[0] - values[1]) / (2 * delta)
        out.append((theoretical, numerical))
    return out


def compute_gradient(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3, init_targets=None,
                     extra_feed_dict=None):
    """The theoretical (from ``tw.gradients``) and numerical (central differences)
    Jacobians of ``y`` with respect to ``x``, each ``[x size, y size]``; a list of such
    pairs when ``x`` is a list. Runs in the default session."""
    as_list = isinstance(x, list | tuple)
    x_list = list(x) if as_list else [x]
    x_shapes = list(x_shape) if as_list else [x_shape]
    if as_list and (x_init_value is None):
        x_inits = [None] * len(x_list)
    elif as_list:
        x_inits = list(x_init_value)
    else:
        x_inits = [x_init_value]
    x_inits = [np.random.random_sample(s).astype(t.dtype.np_dtype) if v is None else np.asarray(v)
               for t, s, v in zip(x_list, x_shapes, x_inits)]
    if init_targets:
        get_default_session().run(init_targets)
    result = _jacobians(x_list, x_shapes, y, y_shape, x_inits, delta, extra_feed_dict)
    return result if as_list else result[0]


def compute_gradient_error(x, x_shape, y, y_shape, x_init_value=None, delta=1e-3, init_targets=None,
                           extra_feed_dict=None):
    """The largest absolute difference between the theoretical and numerical Jacobians."""
    result = compute_gradient(x, x_shape, y, y_shape, x_init_value, delta, init_targets, extra_feed_dict)
    pairs = result if isinstance(result, list) else [result]
    return max((float(np.max(np.abs(t - n))) if t.size else 0.0) for t, n in pairs)
