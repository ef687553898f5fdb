"""Variables on OPENCL and the fused optimizer updates, against the CPU."""

import numpy as np
import pytest

import tensorweave as tw

RNG = np.random.default_rng(4)


def test_variables_live_on_the_device():
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        v = tw.Variable(np.arange(4, dtype=np.float32), name="v")
        inc = tw.assign_add(v, [1.0, 1.0, 1.0, 1.0])
        dec = tw.assign_sub(v, [0.5, 0.5, 0.5, 0.5])
        init = tw.global_variables_initializer()
        ready = tw.is_variable_initialized(v)
        reset = tw.assign(v, tw.zeros([4]))
    with tw.Session(graph=g) as sess:
        assert not sess.run(ready)
        sess.run(init)
        assert sess.run(ready)
        sess.run(inc)
        np.testing.assert_array_equal(sess.run(dec), np.arange(4) + 0.5)
        np.testing.assert_array_equal(sess.run(v), np.arange(4) + 0.5)
        md = tw.RunMetadata()
        sess.run(reset, run_metadata=md)
        assert all("OPENCL" in d for d in md.placement.values())
        np.testing.assert_array_equal(sess.run(v), np.zeros(4))
        from tensorweave_opencl.buffer import CLTensor

        store = sess._resources.local.lookup("", "v")
        assert isinstance(store.value, CLTensor)


def test_uninitialized_read_fails_cleanly():
    g = tw.Graph()
    with g.as_default(), tw.device("/device:OPENCL:0"):
        v = tw.Variable(np.zeros(2, np.float32), name="w")
        y = v * 2.0
    with tw.Session(graph=g) as sess:
        with pytest.raises(tw.errors.FailedPreconditionError, match="uninitialized"):
            sess.run(y)


OPTIMIZERS = {
    "gd": lambda: tw.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tw.train.MomentumOptimizer(0.1, 0.9),
    "nesterov": lambda: tw.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "adagrad": lambda: tw.train.AdagradOptimizer(0.1),
    "adam": lambda: tw.train.AdamOptimizer(0.01),
    "rmsprop": lambda: tw.train.RMSPropOptimizer(0.01, momentum=0.5),
}


def _train(device, make_opt, steps=5):
    w0 = RNG.standard_normal((6, 3)).astype(np.float32)
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    g = tw.Graph()
    with g.as_default(), tw.device(device):
        w = tw.Variable(w0, name="w")
        loss = tw.reduce_sum(tw.square(tw.matmul(x, w) - 1.0))
        train = make_opt().minimize(loss)
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as sess:
        sess.run(init)
        md = tw.RunMetadata()
        sess.run(train, run_metadata=md)
        for _ in range(steps - 1):
            sess.run(train)
        return sess.run(w), md.placement


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_match_the_cpu(name):
    state = RNG.bit_generator.state
    got, placement = _train("/device:OPENCL:0", OPTIMIZERS[name])
    RNG.bit_generator.state = state
    want, _ = _train("/device:CPU:0", OPTIMIZERS[name])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    apply_nodes = [n for n in placement if "Apply" in n or "update" in n]
    assert apply_nodes and all("OPENCL" in placement[n] for n in apply_nodes)


def test_a_variable_written_on_the_cpu_is_updated_on_opencl(monkeypatch):
    # Make OPENCL look like a fast accelerator so the placer moves the update there while
    # the initializer (an earlier plan) ran on the CPU: the update must copy the value over.
    from tensorweave_opencl import device as device_mod

    monkeypatch.setattr(device_mod, "CPU_DEVICE_FLOPS", 2e10)
    monkeypatch.setattr(device_mod, "CPU_DEVICE_NODE_OVERHEAD", 2e-5)
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [200, 200])
        busy = tw.matmul(tw.matmul(x, x), x)  # keeps the CPU busy in the placer's simulation
        v = tw.Variable(np.ones((200, 200), np.float32), name="v")
        step = tw.assign_add(v, tw.ones([200, 200]))
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as sess:
        md = tw.RunMetadata()
        sess.run(init, run_metadata=md)
        assert "CPU" in md.placement["v/Assign"]
        md = tw.RunMetadata()
        sess.run([busy, step], {x: np.ones((200, 200), np.float32)}, run_metadata=md)
        if "OPENCL" not in md.placement["AssignAdd"]:
            pytest.skip("the placer kept the update on the CPU; nothing to check")
        np.testing.assert_array_equal(sess.run(v), np.full((200, 200), 2.0, np.float32))
        np.testing.assert_array_equal(sess.run(v * 2.0), np.full((200, 200), 4.0, np.float32))
