"""Lossy transfer compression (whitepaper 5.5) on OPENCL, through the core's compression kit
(tensorweave/testing/compression_kit.py): the two conversion kernels agree with the CPU
kernels bit for bit, and a plan CPU <-> OPENCL with ``enable_bfloat16_sendrecv=True``
converts on both devices and sends uint16 both ways."""

import numpy as np
import pytest

from tensorweave.testing import compression_kit as kit

OPENCL0 = "/device:OPENCL:0"


@pytest.mark.parametrize("values", ["special", "random", "scalar", "empty"])
def test_compress_matches_the_cpu_kernel_bit_for_bit(values):
    x = {"special": kit.special_floats, "random": kit.random_floats,
         "scalar": lambda: np.float32(-np.pi), "empty": lambda: np.zeros((0, 3), np.float32)}[values]()
    kit.check_compress_matches_cpu(OPENCL0, np.asarray(x))


def test_compress_keeps_specials_and_truncates():
    kit.check_compress_keeps_specials(OPENCL0)


def test_decompress_matches_the_cpu_kernel_for_every_uint16():
    kit.check_decompress_every_uint16(OPENCL0)


def test_round_trip_on_opencl_is_truncation():
    kit.check_round_trip_is_truncation(OPENCL0)


def test_plan_cpu_opencl_cpu_sends_bfloat16_both_ways():
    kit.check_mixed_plan_sends_bfloat16_both_ways(OPENCL0, "OPENCL")


def test_device_holds_uint16(device):
    x = np.arange(0, 1 << 16, 7, dtype=np.uint16)
    t = device.to_device(x)
    assert t.dtype == np.uint16 and t.nbytes == x.nbytes
    np.testing.assert_array_equal(device.to_host(t), x)
