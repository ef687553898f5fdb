"""Lossy transfer compression (whitepaper 5.5) on the GPU, through the core's compression kit
(tensorweave/testing/compression_kit.py): the two conversion kernels of compression.cu agree
with the CPU kernels bit for bit, and a plan CPU <-> GPU with ``enable_bfloat16_sendrecv=True``
converts on both devices and sends uint16 both ways.

Each test runs on the ``gpu`` backends of conftest.py (a real GPU when present, and the CPU
emulator that compiles the same .cu source)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops.compression_ops import COMPRESS, DECOMPRESS
from tensorweave.testing import compression_kit as kit


def test_kernels_are_registered_without_dtype_constraints(gpu):
    # The pass asks for them with no attrs (passes/compression.py): a constraint would hide them.
    from tensorweave import plugins

    kernels = plugins.registry().kernels
    assert kernels.lookup(COMPRESS, gpu.device_type, {}) is not None
    assert kernels.lookup(DECOMPRESS, gpu.device_type, {}) is not None


# "small" stays host-backed until the kernel needs its pointer (tensor.HOST_BYTES).
@pytest.mark.parametrize("values", ["special", "random", "small", "scalar", "empty"])
def test_compress_matches_the_cpu_kernel_bit_for_bit(gpu, values):
    x = {"special": kit.special_floats, "random": kit.random_floats, "small": lambda: kit.random_floats(16, seed=3),
         "scalar": lambda: np.float32(-np.pi), "empty": lambda: np.zeros((0, 3), np.float32)}[values]()
    kit.check_compress_matches_cpu(gpu.device(), np.asarray(x))


def test_compress_keeps_specials_and_truncates(gpu):
    kit.check_compress_keeps_specials(gpu.device())


def test_decompress_matches_the_cpu_kernel_for_every_uint16(gpu):
    kit.check_decompress_every_uint16(gpu.device())


def test_round_trip_on_the_gpu_is_truncation(gpu):
    kit.check_round_trip_is_truncation(gpu.device())


def test_plan_cpu_gpu_cpu_sends_bfloat16_both_ways(gpu):
    kit.check_mixed_plan_sends_bfloat16_both_ways(gpu.device(), gpu.device_type)  # 4096 values: real device buffers


def test_device_holds_uint16(gpu):
    s = tw.Session(graph=tw.Graph())
    dev = next(d for d in s.devices if d.device_type == gpu.device_type)
    s.close()
    for x in (np.arange(0, 1 << 16, 7, dtype=np.uint16), np.arange(5, dtype=np.uint16)):  # device / host-backed
        t = dev.to_device(x)
        assert t.dtype == np.uint16 and t.nbytes == x.nbytes
        np.testing.assert_array_equal(dev.to_host(t), x)
