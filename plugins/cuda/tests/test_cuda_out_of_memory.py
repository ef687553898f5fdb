"""A tensor larger than the GPU: ResourceExhaustedError naming the node, the device and the
bytes, whether the memory limit refuses it or the driver does, and the Session goes on.

On the ``gpu`` backends of conftest.py (a real GPU when present; the emulator's GPU has 256 MiB).
test_cuda_errors.py has the same on a small emulated GPU, with the driver's other failures.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import errors


def _graph(gpu):
    g = tw.Graph()
    with g.as_default(), tw.device(gpu.device()):
        big = tw.zeros([100000, 100000, 10], name="big")   # 400 GB of float32: more than any GPU
        # (144 GB once seemed enough: an H200 holds 150 GB, and the tensor fit)
        small = tw.reduce_sum(tw.ones([1000, 100]) * 2.0, name="small")
    return g, big, small


@pytest.mark.parametrize("limit", ["default", "above the device"])
def test_a_tensor_larger_than_the_gpu(gpu, monkeypatch, limit):
    if limit != "default":  # the allocator lets it through: the driver refuses
        monkeypatch.setenv("TENSORWEAVE_GPU_MEMORY_LIMIT", str(1 << 50))
    g, big, small = _graph(gpu)
    with tw.Session(graph=g) as s:
        assert s.run(small) == pytest.approx(200000.0)
        with pytest.raises(errors.ResourceExhaustedError) as info:
            s.run(big.op)  # a target: were it to fit, nothing is copied to the host
        msg = str(info.value)
        assert msg.startswith(f"Fill node 'big' on {gpu.full_name}: out of memory on {gpu.full_name}: "
                              "asked for 400000000000 bytes"), msg
        if limit != "default":
            assert "the device refused" in msg, msg
        assert info.value.node_def == "big"
        assert s.run(small) == pytest.approx(200000.0)   # the Session goes on
    # and a new Session on the same GPU has its memory back
    with tw.Session(graph=g) as s:
        assert s.run(small) == pytest.approx(200000.0)
        dev = [d for d in s.devices if d.device_type == gpu.device_type][0]
        y = dev.to_host(dev.to_device(np.ones(1 << 20, np.float32)))
        assert y.sum() == 1 << 20
