"""oneDNN's convolutions for the CPU's float32 Conv2D (with its bias added and its ReLU, for
_FusedConv2D) and its two gradients, and its float32 matrix products (``sgemm``) (the cpu
plugin's ``onednn`` extra: Intel's ``onednn-cpu-gomp`` wheel, oneDNN 3.x built with GNU OpenMP).

This module owns the binding: finding and loading ``libdnnl``, the few entry points of its C
API that convolutions and products need (declared through ctypes, from oneDNN's ``dnnl.h``),
``Convolution``, the primitives of one convolution geometry, and ``sgemm``. kernels/nn.py
and blas.py decide when to use them and keep their im2col + BLAS paths for everything else
(other dtypes, geometries oneDNN refuses, small products, machines without the extra).

Why a library: the im2col + OpenBLAS convolutions run their GEMMs with only 32-64 output
columns at 120-170 GFLOP/s on this project's 2-core machines, and copy every window; oneDNN's
direct (brgemm) convolutions, TensorFlow's own CPU convolutions, do the convnet benchmark's
second layer in 8 ms per direction against our 19-23 ms (first layer: 1 ms against 5-6).

How it is used: activations stay in the graph's own layout (NHWC or NCHW, described to oneDNN
by strides, so nothing is transposed), the filter in TF's HWIO. Each primitive is created
with weights in the layout oneDNN prefers (``any``), and the filter is reordered into it on
every call (a few hundred KB: the variable changes every step); the weights gradient comes
back through the reverse reorder. Primitives are built once per geometry and kept by the
node (``Convolutions``); oneDNN parallelises inside a call with OpenMP.

``enabled()`` is false without the library or with ``TENSORWEAVE_ONEDNN=0``; tests switch
it through ``_state["on"]``.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import threading
import weakref

import numpy as np

DISTRIBUTION = "onednn-cpu-gomp"

# oneDNN C API constants (include/oneapi/dnnl/dnnl_types.h, dnnl_common_types.h; stable in 3.x)
_SUCCESS = 0
_CPU_ENGINE = 1
_F32 = 3
_FORMAT_ANY = 1
_FORWARD_TRAINING = 64
_CONVOLUTION_DIRECT = 1
_STREAM_IN_ORDER = 1
_QUERY_WEIGHTS_MD = 131
_QUERY_DIFF_WEIGHTS_MD = 132
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS = 1, 17, 33
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS = 129, 145, 161
_ARG_BIAS = 41
_ELTWISE_RELU = 0x20  # dnnl_eltwise_relu, the first of the eltwise kinds in every 3.x
_MAX_NDIMS = 12
_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented", 5: "runtime error",
           6: "not required"}

_Dims = ctypes.c_int64 * _MAX_NDIMS
_P = ctypes.c_void_p


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


# The argument arrays' types, made once: ``_ExecArg * n`` makes a new ctypes type (with
# reference cycles for the garbage collector) on every call.
_ARG_ARRAYS = {n: _ExecArg * n for n in (2, 3, 4)}


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


class OneDNNError(RuntimeError):
    """A oneDNN call that did not succeed (status and what was called)."""


_lock = threading.Lock()
_exec_lock = threading.Lock()
_state: dict = {}  # "lib", "engine", "version" once loaded; "on": tests' switch
_local = threading.local()  # each thread's stream
# executions (tests check the path taken); "forward_bias[_relu]": a _FusedConv2D's
stats = {"forward": 0, "forward_bias": 0, "forward_bias_relu": 0, "backward_data": 0, "backward_weights": 0}
products = {"sgemm": 0}  # products computed by oneDNN (tests check the path taken)

_SIGNATURES = {
    "dnnl_version": (ctypes.POINTER(_Version), []),
    "dnnl_engine_create": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_size_t]),
    "dnnl_stream_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_uint]),
    "dnnl_stream_destroy": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_create_with_strides": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, _Dims, ctypes.c_int, _Dims]),
    "dnnl_memory_desc_create_with_tag": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.c_int, _Dims, ctypes.c_int, ctypes.c_int]),
    "dnnl_memory_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_memory_desc_get_size": (ctypes.c_size_t, [_P]),
    "dnnl_convolution_forward_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P]),
    "dnnl_convolution_backward_data_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P, _P]),
    "dnnl_convolution_backward_weights_primitive_desc_create": (
        ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _P, _Dims, _Dims, _Dims, _Dims, _P, _P]),
    "dnnl_reorder_primitive_desc_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P, _P, _P]),
    "dnnl_primitive_desc_query_md": (_P, [_P, ctypes.c_int, ctypes.c_int]),
    "dnnl_primitive_desc_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_create": (ctypes.c_int, [ctypes.POINTER(_P), _P]),
    "dnnl_primitive_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_execute": (ctypes.c_int, [_P, _P, ctypes.c_int, ctypes.POINTER(_ExecArg)]),
    "dnnl_memory_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, _P, _P]),
    "dnnl_memory_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_attr_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "dnnl_primitive_attr_destroy": (ctypes.c_int, [_P]),
    "dnnl_primitive_attr_set_post_ops": (ctypes.c_int, [_P, _P]),
    "dnnl_post_ops_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "dnnl_post_ops_destroy": (ctypes.c_int, [_P]),
    "dnnl_post_ops_append_eltwise": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_float, ctypes.c_float]),
    "dnnl_sgemm": (ctypes.c_int, [ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_float, _P, ctypes.c_int64, _P, ctypes.c_int64, ctypes.c_float, _P,
                                  ctypes.c_int64]),
}


def _library_paths():
    """Where libdnnl may be: the wheel's files first (installed under the environment's
    ``lib``), then the system's loader path."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = [str(f.locate()) for f in files if f.name.startswith("libdnnl.so.3")]
    return sorted(found, key=len) + ["libdnnl.so.3"]


def _open(path):
    """``ctypes.CDLL(path)`` with OpenMP's threads waiting passively between parallel regions
    unless the user chose (``OMP_WAIT_POLICY``): GNU OpenMP's default is to spin, and on a
    machine with few cores the spinning threads take the cores the executor's other threads,
    NumPy and the BLAS need (the convnet benchmark's step: 114-118 ms of CPU per step and
    56-62 ms best, against 92-96 ms and 50-51 ms passive). libgomp reads the variable once,
    when it is loaded (with libdnnl, here), so it is set for the load only and restored:
    child processes inherit nothing."""
    if "OMP_WAIT_POLICY" in os.environ:
        return ctypes.CDLL(path)
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        return ctypes.CDLL(path)
    finally:
        del os.environ["OMP_WAIT_POLICY"]


def _load():
    """(library, engine, version string), or None when oneDNN 3.x cannot be loaded."""
    for path in _library_paths():
        try:
            lib = _open(path)
        except OSError:
            continue
        try:
            for name, (res, args) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = res, args
        except AttributeError:  # not the C API this module speaks
            continue
        v = lib.dnnl_version().contents
        if v.major != 3:
            continue
        engine = _P()
        if lib.dnnl_engine_create(ctypes.byref(engine), _CPU_ENGINE, 0) != _SUCCESS:
            continue
        return lib, engine, f"{v.major}.{v.minor}.{v.patch}"
    return None


def _after_fork_in_child():
    """A forked child has none of the parent's OpenMP threads, and GNU OpenMP, which oneDNN
    runs on, may wait for them forever: the child's convolutions take the own paths."""
    _state["on"] = False
    _local.__dict__.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _loaded():
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                got = _load()
                _state["version"] = got[2] if got else None
                _state["engine"] = got[1] if got else None
                _state["lib"] = got[0] if got else None
    return _state["lib"]


def available() -> bool:
    """Whether oneDNN 3.x is installed and loads."""
    return _loaded() is not None


def version() -> str | None:
    _loaded()
    return _state["version"]


def enabled() -> bool:
    """Whether the CPU's convolutions use oneDNN: installed, and not switched off with
    ``TENSORWEAVE_ONEDNN=0`` (read once) or by a test."""
    on = _state.get("on")
    if on is None:
        off = os.environ.get("TENSORWEAVE_ONEDNN", "").strip().lower() in ("0", "false", "off", "no")
        on = _state["on"] = not off and available()
    return on


def _check(status, what):
    if status != _SUCCESS:
        raise OneDNNError(f"oneDNN {what} failed: {_STATUS.get(status, 'status')} ({status})")


def _stream():
    s = getattr(_local, "stream", None)
    if s is None:
        s = _P()
        _check(_state["lib"].dnnl_stream_create(ctypes.byref(s), _state["engine"], _STREAM_IN_ORDER), "stream creation")
        _local.stream = s
    return s


class _Owned:
    """oneDNN objects a ``Convolution`` created, destroyed with it (memory descriptors,
    primitive descriptors, primitives)."""

    def __init__(self, lib):
        self.lib, self.mds, self.pds, self.prims = lib, [], [], []

    def release(self):
        for p in self.prims:
            self.lib.dnnl_primitive_destroy(p)
        for pd in self.pds:
            self.lib.dnnl_primitive_desc_destroy(pd)
        for md in self.mds:
            self.lib.dnnl_memory_desc_destroy(md)
        self.prims, self.pds, self.mds = [], [], []


def _strides(dims, order):
    """Element strides of ``dims`` (oneDNN's logical order) laid out in memory as ``order``
    (indices of ``dims``, outermost first)."""
    strides, step = [0] * len(dims), 1
    for i in reversed(order):
        strides[i] = step
        step *= dims[i]
    return strides


class Convolution:
    """The oneDNN primitives of one 2-D convolution: input ``[n, c, h, w]`` in ``fmt`` (NHWC
    or NCHW), filter ``[kh, kw, c, co]`` (HWIO), output ``[n, co, oh, ow]`` in ``fmt``; strides,
    dilations (TF's: 1 is none) and explicit paddings ``(top, bottom, left, right)``. Each
    direction's primitives are made on first use; ``None`` from ``make`` when oneDNN has no
    implementation for the geometry."""

    @classmethod
    def make(cls, n, c, h, w, co, kh, kw, oh, ow, fmt, strides, dilations, pads):
        lib = _loaded()
        if lib is None:
            return None
        try:
            return cls(lib, n, c, h, w, co, kh, kw, oh, ow, fmt, strides, dilations, pads)
        except OneDNNError:
            return None

    def __init__(self, lib, n, c, h, w, co, kh, kw, oh, ow, fmt, strides, dilations, pads):
        self._lib = lib
        self._owned = _Owned(lib)
        weakref.finalize(self, self._owned.release)
        self._lock = threading.Lock()
        self._made: dict = {}
        self.x_shape = (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)
        self.y_shape = (n, oh, ow, co) if fmt == "NHWC" else (n, co, oh, ow)
        self.f_shape = (kh, kw, c, co)
        layout = (0, 2, 3, 1) if fmt == "NHWC" else (0, 1, 2, 3)
        self._x_md = self._md([n, c, h, w], _strides([n, c, h, w], layout))
        self._y_md = self._md([n, co, oh, ow], _strides([n, co, oh, ow], layout))
        self._f_md = self._md([co, c, kh, kw], _strides([co, c, kh, kw], (2, 3, 1, 0)))  # HWIO
        self._any_md = self._md([co, c, kh, kw], None)
        self._bias_md = self._md([co], [1])  # (a _FusedConv2D's)
        pt, pb, pl, pr = pads
        self._geometry = (_Dims(*strides), _Dims(dilations[0] - 1, dilations[1] - 1), _Dims(pt, pl), _Dims(pb, pr))
        pd = _P()
        _check(lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), _state["engine"], _FORWARD_TRAINING, _CONVOLUTION_DIRECT,
            self._x_md, self._any_md, None, self._y_md, *self._geometry, None), "convolution")
        self._owned.pds.append(pd)
        self._fwd_pd = pd

    # -- descriptors and primitives -----------------------------------------------------
    def _md(self, dims, strides):
        md = _P()
        if strides is None:
            st = self._lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(dims), _Dims(*dims), _F32, _FORMAT_ANY)
        else:
            st = self._lib.dnnl_memory_desc_create_with_strides(ctypes.byref(md), len(dims), _Dims(*dims), _F32,
                                                                _Dims(*strides))
        _check(st, "memory descriptor")
        self._owned.mds.append(md)
        return md

    def _primitive(self, pd):
        p = _P()
        _check(self._lib.dnnl_primitive_create(ctypes.byref(p), pd), "primitive creation")
        self._owned.prims.append(p)
        return p

    def _reorder(self, src_md, dst_md):
        pd = _P()
        engine = _state["engine"]
        _check(self._lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, engine, dst_md, engine, None),
               "reorder")
        self._owned.pds.append(pd)
        return self._primitive(pd)

    def _direction(self, kind):
        """(primitive, its weights' descriptor, that descriptor's size in bytes, the filter's
        reorder, the primitive's descriptor) of ``kind``, made once."""
        made = self._made.get(kind)
        if made is not None:
            return made
        with self._lock:
            made = self._made.get(kind)
            if made is not None:
                return made
            _omp_threads(_team())  # (sized for the whole team: see Convolutions.get)
            lib, engine = self._lib, _state["engine"]
            if kind == "forward":
                pd, query = self._fwd_pd, _QUERY_WEIGHTS_MD
            elif kind in ("forward_bias", "forward_bias_relu"):
                pd, query = self._forward_with_bias(kind == "forward_bias_relu"), _QUERY_WEIGHTS_MD
            else:
                pd = _P()
                if kind == "backward_data":
                    st = lib.dnnl_convolution_backward_data_primitive_desc_create(
                        ctypes.byref(pd), engine, _CONVOLUTION_DIRECT, self._x_md, self._any_md, self._y_md,
                        *self._geometry, self._fwd_pd, None)
                    query = _QUERY_WEIGHTS_MD
                else:
                    st = lib.dnnl_convolution_backward_weights_primitive_desc_create(
                        ctypes.byref(pd), engine, _CONVOLUTION_DIRECT, self._x_md, self._any_md, None, self._y_md,
                        *self._geometry, self._fwd_pd, None)
                    query = _QUERY_DIFF_WEIGHTS_MD
                _check(st, f"convolution {kind}")
                self._owned.pds.append(pd)
            w_md = _P(lib.dnnl_primitive_desc_query_md(pd, query, 0))
            size = lib.dnnl_memory_desc_get_size(w_md)
            reorder = self._reorder(w_md, self._f_md) if kind == "backward_weights" else self._reorder(self._f_md, w_md)
            made = self._made[kind] = (self._primitive(pd), w_md, size, reorder, pd)
            return made

    def _forward_with_bias(self, relu: bool):
        """The forward primitive's descriptor with a bias added to each output channel
        (a _FusedConv2D's): the same sums as the convolution's, the bias added to each once
        they are done (the values of Conv2D then a bias add, bit for bit); with ``relu``,
        each result then rectified by oneDNN's ReLU post-op, which gives 0 for NaN (Relu
        keeps NaN: the caller asks for it only where no result can be NaN)."""
        lib = self._lib
        pd, attr, post = _P(), _P(), _P()
        _check(lib.dnnl_primitive_attr_create(ctypes.byref(attr)), "primitive attributes")
        try:
            if relu:
                _check(lib.dnnl_post_ops_create(ctypes.byref(post)), "post-ops")
                _check(lib.dnnl_post_ops_append_eltwise(post, _ELTWISE_RELU, 0.0, 0.0), "ReLU post-op")
                _check(lib.dnnl_primitive_attr_set_post_ops(attr, post), "post-ops")
            _check(lib.dnnl_convolution_forward_primitive_desc_create(
                ctypes.byref(pd), _state["engine"], _FORWARD_TRAINING, _CONVOLUTION_DIRECT,
                self._x_md, self._any_md, self._bias_md, self._y_md, *self._geometry, attr), "convolution with bias")
        finally:
            if post:
                lib.dnnl_post_ops_destroy(post)
            lib.dnnl_primitive_attr_destroy(attr)
        self._owned.pds.append(pd)
        return pd

    # -- execution ----------------------------------------------------------------------
    def _run(self, prim, args):
        """Execute ``prim`` on ``args`` ((arg id, descriptor, array) triples): memory objects
        wrap the arrays for this call only, so concurrent calls share nothing but the
        primitive (oneDNN's primitives are thread-safe). One call at a time in the process:
        each spreads over every core already, and two at once (a convolution's two gradients
        on two executor threads) would start two OpenMP teams on the same cores, as TF's
        shared intra-op pool avoids."""
        lib, engine = self._lib, _state["engine"]
        mems = []
        try:
            for _, md, arr in args:
                m = _P()
                _check(lib.dnnl_memory_create(ctypes.byref(m), md, engine, _P(arr.ctypes.data)), "memory creation")
                mems.append(m)
            exec_args = _ARG_ARRAYS[len(args)](*[_ExecArg(a, m) for (a, _, _), m in zip(args, mems)])
            with _exec_lock:
                _omp_threads(_team())  # (a product on this thread may have asked for one)
                _check(lib.dnnl_primitive_execute(prim, _stream(), len(args), exec_args), "execution")
        finally:
            for m in mems:
                lib.dnnl_memory_destroy(m)

    def _with_filter(self, kind, f, arg, md, value, out_arg, out_md, out_shape, extra=()):
        """Run ``kind`` (forward or backward data): the filter reordered into the layout the
        primitive wants, ``value`` (x or dy) as ``arg``, the result a new array of
        ``out_shape`` as ``out_arg``; ``extra``: more (arg, descriptor, array) (the bias)."""
        prim, w_md, size, reorder, _ = self._direction(kind)
        value, f = np.ascontiguousarray(value, np.float32), np.ascontiguousarray(f, np.float32)
        w = np.empty(size // 4, np.float32)
        self._run(reorder, [(_ARG_SRC, self._f_md, f), (_ARG_DST, w_md, w)])
        out = np.empty(out_shape, np.float32)
        self._run(prim, [(arg, md, value), (_ARG_WEIGHTS, w_md, w), *extra, (out_arg, out_md, out)])
        stats[kind] += 1
        return out

    def forward(self, x, f, bias=None, relu=False):
        """The convolution; with ``bias`` (a vector per output channel), that added to each
        output in the same pass (a _FusedConv2D), and with ``relu`` each output rectified
        there too (NaN becomes 0: see ``_forward_with_bias``)."""
        if bias is None:
            return self._with_filter("forward", f, _ARG_SRC, self._x_md, x, _ARG_DST, self._y_md, self.y_shape)
        kind = "forward_bias_relu" if relu else "forward_bias"
        bias = np.ascontiguousarray(bias, np.float32)
        return self._with_filter(kind, f, _ARG_SRC, self._x_md, x, _ARG_DST, self._y_md, self.y_shape,
                                 [(_ARG_BIAS, self._bias_md, bias)])

    def backward_data(self, dy, f):
        return self._with_filter("backward_data", f, _ARG_DIFF_DST, self._y_md, dy, _ARG_DIFF_SRC, self._x_md,
                                 self.x_shape)

    def backward_weights(self, x, dy):
        prim, w_md, size, reorder, _ = self._direction("backward_weights")
        x, dy = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(dy, np.float32)
        dw = np.empty(size // 4, np.float32)
        self._run(prim, [(_ARG_SRC, self._x_md, x), (_ARG_DIFF_DST, self._y_md, dy), (_ARG_DIFF_WEIGHTS, w_md, dw)])
        df = np.empty(self.f_shape, np.float32)
        self._run(reorder, [(_ARG_SRC, w_md, dw), (_ARG_DST, self._f_md, df)])
        stats["backward_weights"] += 1
        return df


class Convolutions:
    """One node's ``Convolution`` objects by geometry (a few: shapes change with the batch
    size), or None where oneDNN has none."""

    MAX = 8

    def __init__(self, fmt, strides, dilations):
        self.fmt, self.strides, self.dilations = fmt, strides, dilations
        self._by_shape: dict = {}

    def get(self, n, c, h, w, co, kh, kw, oh, ow, pads):
        key = (n, c, h, w, co, kh, kw, oh, ow, pads)
        try:
            return self._by_shape[key]
        except KeyError:
            pass
        conv = None
        # oneDNN derives the output size with floor division; it must agree with TF's.
        (sh, sw), (dh, dw) = self.strides, self.dilations
        pt, pb, pl, pr = pads
        if min(pads) >= 0 and (h + pt + pb - (kh - 1) * dh - 1) // sh + 1 == oh \
                and (w + pl + pr - (kw - 1) * dw - 1) // sw + 1 == ow and min(n, c, h, w, co, oh, ow) > 0:
            # oneDNN sizes a primitive's work split for the team this thread would run now:
            # the whole team, whatever a product on this thread asked for before.
            _omp_threads(_team())
            conv = Convolution.make(n, c, h, w, co, kh, kw, oh, ow, self.fmt, self.strides, self.dilations, pads)
        if len(self._by_shape) >= self.MAX:
            self._by_shape.pop(next(iter(self._by_shape)))
        self._by_shape[key] = conv
        return conv


# -- products ---------------------------------------------------------------------------
# oneDNN's sgemm (its JIT kernels, TF's own CPU products) against OpenBLAS's, single-threaded
# on this project's 2-core machines: an LSTM cell's [32, 400] x [400, 800] 240-250 us against
# 380-520, its backward [32, 800] x T[400, 800] 200 against 360-520; mid-sized products
# 0.82-0.9x; below a few MFLOP OpenBLAS is faster (the mlp's [64, 64] x [64, 128]: 26-30 us
# against 15-21). On its OpenMP team, a large product with a short inner dimension or few
# output columns: a language model's softmax [1120, 200] x [200, 10000] 29.7-38.8 ms against
# 33.7-45.6 split by rows over the cores on OpenBLAS (other large shapes were faster on
# either, within this machine's noise: those stay OpenBLAS's). blas.py decides which
# products come here.

def _operand(x):
    """(b"N" or b"T", leading dimension) describing the 2-D float32 array ``x`` as a row-major
    oneDNN operand (its rows, or its transpose's, evenly spaced), or None."""
    rows, cols = x.shape
    s0, s1 = x.strides
    if s1 == 4 and s0 % 4 == 0 and s0 >= 4 * cols:
        return b"N", s0 // 4
    if s0 == 4 and s1 % 4 == 0 and s1 >= 4 * rows:
        return b"T", s1 // 4
    return None


def _omp():
    """GNU OpenMP, the runtime libdnnl loaded (False when it cannot be found), and the team
    size a thread gets by default (``OMP_NUM_THREADS``, else one per core)."""
    omp = _state.get("omp")
    if omp is None:
        try:
            omp = ctypes.CDLL("libgomp.so.1")
            _state["team"] = max(1, omp.omp_get_max_threads())
        except OSError:
            omp = False
        _state["omp"] = omp
    return omp


def _team() -> int:
    """The team size convolutions run with: OpenMP's default."""
    if not _omp():
        return 1
    return _state["team"]


def _omp_threads(n: int) -> None:
    """This thread's OpenMP team size for its next oneDNN calls (an OpenMP setting of the
    calling thread, ``omp_set_num_threads``: a product on one executor thread does not change
    another's, but it does change this thread's later convolutions, which set theirs back)."""
    if getattr(_local, "omp", None) == n:
        return
    omp = _omp()
    if omp:
        omp.omp_set_num_threads(n)
        _local.omp = n


def sgemm(a, b, c, beta: float = 0.0, team: bool = False) -> bool:
    """``c = a @ b + beta * c`` for 2-D float32 arrays (``c`` of the product's shape, its rows
    evenly spaced: a block of columns of a wider array will do); False, with nothing
    written, where an array's layout is not one oneDNN takes (then the caller computes it).
    On this thread alone, so concurrent calls from several executor threads run side by
    side; with ``team`` on OpenMP's whole team, one such call at a time in the process (as
    convolutions)."""
    la, lb, lc = _operand(a), _operand(b), _operand(c)
    if la is None or lb is None or lc is None or lc[0] != b"N":
        return False
    m, k = a.shape
    n = b.shape[1]
    args = (la[0], lb[0], m, n, k, 1.0, a.ctypes.data, la[1], b.ctypes.data, lb[1], beta, c.ctypes.data, lc[1])
    if team:
        with _exec_lock:
            _omp_threads(_team())
            _check(_state["lib"].dnnl_sgemm(*args), "sgemm")
    else:
        _omp_threads(1)
        _check(_state["lib"].dnnl_sgemm(*args), "sgemm")
    with _lock:  # (concurrent callers: an exact count)
        products["sgemm"] += 1
    return True
