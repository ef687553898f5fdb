"""The sparse-model kernels on OPENCL against the CPU: ref-variable scatters with repeated
indices (in place, copy-on-write), segment reductions, pad modes, the sparse optimizer
updates, and embedding training end to end on the device; what the device does with
out-of-range indices it cannot check."""

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.ops import training_ops

OPENCL0 = "/device:OPENCL:0"
CPU0 = "/device:CPU:0"
RNG = np.random.default_rng(11)


def _on_both(build, feeds=None, steps=1, init=True, fetch_after=None):
    """Run ``build()`` (returning fetches) on OPENCL:0 and on CPU:0 ``steps`` times; returns
    the last results of both, and checks every node ran on its device."""
    results = []
    for dev in (OPENCL0, CPU0):
        g = tw.Graph()
        with g.as_default(), tw.device(dev):
            fetches, after = build()
            initializer = tw.global_variables_initializer() if init else None
        with tw.Session(graph=g) as sess:
            if initializer is not None:
                sess.run(initializer)
            md = tw.RunMetadata()
            for _ in range(steps):
                out = sess.run(fetches, feeds or {}, run_metadata=md)
            if after is not None:
                out = [out, sess.run(after)]
        elsewhere = {n: d for n, d in md.placement.items() if dev[1:] not in d}
        assert not elsewhere, f"nodes not placed on {dev}: {elsewhere}"
        results.append(out)
    return results


def _same(got, want):
    if isinstance(want, list | tuple):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5 if got.dtype == np.float32 else 1e-12, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------
# ref-variable scatters
SCATTERS = {"update": tw.scatter_update, "add": tw.scatter_add, "sub": tw.scatter_sub, "mul": tw.scatter_mul,
            "div": tw.scatter_div, "min": tw.scatter_min, "max": tw.scatter_max}


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
@pytest.mark.parametrize("kind", sorted(SCATTERS))
def test_scatter_with_repeated_indices_matches_the_cpu(kind, dtype):
    init = (RNG.standard_normal((6, 3)) * 10).astype(dtype)
    upd = (RNG.standard_normal((5, 3)) * 4).astype(dtype)
    if kind == "div":
        upd[upd == 0] = 3
    ids = np.array([4, 1, 4, 0, 4], np.int64)

    def build():
        v = tw.Variable(init, name="v")
        op = SCATTERS[kind](v, ids, upd)
        return op, v.read_value()
    dev, cpu = _on_both(build, steps=2)
    _same(dev, cpu)


def test_scalar_updates_scatter_nd_and_int8_tables():
    init = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def build():
        v = tw.Variable(init, name="v")
        w = tw.Variable(np.arange(12, dtype=np.uint8).reshape(4, 3), name="w")
        a = tw.scatter_nd_add(v, [[1, 2], [0, 0], [1, 2]], np.ones((3, 4), np.float32))
        with tw.control_dependencies([a]):
            b = tw.scatter_nd_update(v, [[0, 1, 3], [1, 0, 0]], [-5.0, 7.0])
        c = tw.scatter_mul(w, [3, 3, 0], np.full((3, 3), 2, np.uint8))
        d = tw.scatter_sub(w, [2], tw.constant(1, tw.uint8))  # a scalar applies to every element of the rows
        return [b, c, d], [v.read_value(), w.read_value()]
    dev, cpu = _on_both(build)
    _same(dev, cpu)


def _store(sess, name):
    return sess._resources.local.lookup("", name)


def test_scatter_updates_the_table_in_place_and_touches_only_its_rows():
    vocab = 20000
    init = RNG.standard_normal((vocab, 8)).astype(np.float32)
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        v = tw.Variable(init, name="table")
        ids = tw.placeholder(tw.int32, [None])
        add = tw.scatter_add(v, ids, tw.ones([tw.shape(ids)[0], 8]))
    with tw.Session(graph=g) as sess:
        sess.run(v.initializer)
        sess.run(add.op, {ids: [0]})  # the first update may copy (the initial value is a constant's)
        buf = _store(sess, "table").value.buf  # (holding the block itself would share it)
        for _ in range(3):
            sess.run(add.op, {ids: [7, 7, 19999]})
            assert _store(sess, "table").value.buf is buf, "the table was copied, not updated in place"
        after = sess.run(v)
    np.testing.assert_allclose(after[7], init[7] + 6, rtol=1e-6)
    np.testing.assert_allclose(after[19999], init[19999] + 3, rtol=1e-6)
    others = np.setdiff1d(np.arange(vocab), [0, 7, 19999])
    assert after[others].tobytes() == init[others].tobytes()


def test_a_tensor_sharing_the_tables_block_makes_the_update_copy(device):
    """Copy-on-write on the device: a view of the table's buffer (what Reshape returns) keeps
    its values when the table is updated."""
    from tensorweave.kernels import state
    from tensorweave.runtime.containers import VariableStore
    from tensorweave_opencl.kernels.scatter import CLRows

    class Ctx:
        pass

    ctx = Ctx()
    ctx.device, ctx.op_type, ctx.node_name = device, "ScatterAdd", "test"
    rows = CLRows(ctx)
    store = VariableStore("t", "", tw.float32, tw.TensorShape([3, 2]))
    store.value, store.device = device.to_device(np.zeros((3, 2), np.float32)), device
    alone = state.writable(store, device, rows)
    assert alone is store.value
    del alone
    view = store.value.reshape((6,))
    assert not rows.owns(store.value)
    mine = state.writable(store, device, rows)
    assert mine is store.value and mine.block is not view.block
    rows.scatter("add", mine, np.array([1, 1]), device.to_device(np.ones((2, 2), np.float32)))
    del mine
    assert device.to_host(view).sum() == 0
    np.testing.assert_array_equal(device.to_host(store.value), [[0, 0], [2, 2], [0, 0]])


def test_scatter_out_of_range_is_an_error_and_leaves_the_variable_unchanged():
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        v = tw.Variable(np.ones((4, 2), np.float32), name="v")
        ids = tw.placeholder(tw.int32, [None])
        op = tw.scatter_sub(v, ids, tw.ones([2, 2]), name="sub")
    with tw.Session(graph=g) as sess:
        sess.run(v.initializer)
        with pytest.raises(tw.errors.InvalidArgumentError, match=r"ScatterSub node 'sub'.*indices\[1\] = 4 is not "
                                                                 r"in \[0, 4\)"):
            sess.run(op, {ids: [0, 4]})
        np.testing.assert_array_equal(sess.run(v), np.ones((4, 2)))


# ---------------------------------------------------------------------------------------
# segment reductions
def test_segment_reductions_match_the_cpu():
    data = RNG.standard_normal((7, 3)).astype(np.float32)
    idata = (data * 10).astype(np.int32)
    sorted_ids = np.array([0, 0, 2, 2, 2, 5, 5], np.int32)
    unsorted = np.array([3, 0, 3, -1, 1, 0, 3], np.int64)  # -1 is dropped

    def build():
        d = tw.constant(data)
        i = tw.constant(idata)
        out = []
        for x in (d, i):
            out += [tw.segment_sum(x, sorted_ids), tw.segment_mean(x, sorted_ids), tw.segment_max(x, sorted_ids),
                    tw.segment_min(x, sorted_ids)]
        out += [tw.unsorted_segment_sum(d, unsorted, 4), tw.unsorted_segment_max(d, unsorted, 5),
                tw.unsorted_segment_min(i, unsorted, 4)]
        return out, None
    dev, cpu = _on_both(build)
    _same(dev, cpu)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_sparse_segment_ops_and_their_gradients_match_the_cpu(combiner):
    data = RNG.standard_normal((6, 4)).astype(np.float32)
    indices = np.array([5, 0, 5, 2, 2, 1], np.int32)
    segs = np.array([0, 0, 1, 3, 3, 3], np.int64)
    fn = {"sum": tw.sparse_segment_sum, "mean": tw.sparse_segment_mean, "sqrtn": tw.sparse_segment_sqrt_n}[combiner]
    weights = RNG.standard_normal((4, 4)).astype(np.float32)

    def build():
        x = tw.constant(data)
        y = fn(x, indices, segs)
        w = tw.constant(weights)
        (gx,) = tw.gradients(tw.reduce_sum(y * w), [x])
        return [y, tw.convert_to_tensor(gx)], None
    dev, cpu = _on_both(build)
    _same(dev, cpu)


def test_embedding_lookup_sparse_runs_on_the_device():
    params = RNG.standard_normal((10, 3)).astype(np.float32)
    sp = tw.SparseTensorValue(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [2, 1], [2, 2]], np.int64),
                              np.array([3, 7, 3, 1, 1, 9], np.int64), np.array([3, 3], np.int64))

    def build():
        ids = tw.sparse_placeholder(tw.int64, name="ids")
        v = tw.Variable(params, name="emb")
        out = [tw.nn.embedding_lookup_sparse(v, ids, None, combiner=c) for c in ("sum", "mean", "sqrtn")]
        build.ids = ids
        return out, None
    results = []
    for dev in (OPENCL0, CPU0):
        g = tw.Graph()
        with g.as_default(), tw.device(dev):
            fetches, _ = build()
            init = tw.global_variables_initializer()
        with tw.Session(graph=g) as sess:
            sess.run(init)
            md = tw.RunMetadata()
            results.append(sess.run(fetches, {build.ids: sp}, run_metadata=md))
        if dev == OPENCL0:
            assert any("SparseSegment" in n and "OPENCL" in d for n, d in md.placement.items())
    _same(*results)


# ---------------------------------------------------------------------------------------
# pad modes, reverse, top_k
@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "SYMMETRIC"])
def test_pad_modes_and_their_gradients_match_the_cpu(mode):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    pads = [[2, 1], [0, 3], [1, 1]]
    weights = RNG.standard_normal((6, 7, 4)).astype(np.float32)

    def build():
        xt = tw.constant(x)
        y = tw.pad(xt, pads, mode=mode) if mode != "CONSTANT" else tw.pad(xt, pads, constant_values=1.5)
        w = tw.constant(weights)
        (gx,) = tw.gradients(tw.reduce_sum(y * w), [xt])
        return [y, gx, tw.reverse(y, [0, 2])], None
    dev, cpu = _on_both(build)
    _same(dev, cpu)


def test_top_k_ties_and_nans_match_the_cpu():
    x = np.array([[1.0, 3.0, 3.0, np.nan, -1.0, 3.0], [0.0, 0.0, 0.0, 0.0, 5.0, -2.0]], np.float32)

    def build():
        v, i = tw.nn.top_k(tw.constant(x), 4)
        return [v, i], None
    dev, cpu = _on_both(build)
    _same(dev, cpu)


# ---------------------------------------------------------------------------------------
# what the device does with indices it cannot check (documented in the kernel modules)
def test_out_of_range_indices_on_the_device_read_zeros_or_are_dropped():
    params = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        gnd = tw.gather_nd(tw.constant(params), tw.constant([[0, 1], [3, 0], [2, -1], [2, 3]]))
        ids = tw.constant([0, 7, 0, 1])
        mx = tw.unsorted_segment_max(tw.constant([1.0, 9.0, 2.0, 4.0]), ids, 2)
        ss = tw.sparse_segment_sum(tw.constant(params), tw.constant([0, 5, 1]), tw.constant([0, 0, 1]))
    with tw.Session(graph=g) as sess:
        got_gnd, got_mx, got_ss = sess.run([gnd, mx, ss])
    np.testing.assert_array_equal(got_gnd, [1.0, 0.0, 0.0, 11.0])
    np.testing.assert_array_equal(got_mx, [2.0, 4.0])
    np.testing.assert_array_equal(got_ss, [params[0], params[1]])


# ---------------------------------------------------------------------------------------
# sparse optimizer updates
# name -> (the update of var, its slots s, gradient g and indices i, with c(x) a scalar of the
# variable's dtype; the number of slots)
SPARSE_APPLY = {
    "momentum": (lambda v, s, g, i, c: training_ops.sparse_apply_momentum(v, s[0], c(0.1), g, i, c(0.9)), 1),
    "nesterov": (lambda v, s, g, i, c: training_ops.sparse_apply_momentum(v, s[0], c(0.1), g, i, c(0.9),
                                                                          use_nesterov=True), 1),
    "adagrad": (lambda v, s, g, i, c: training_ops.sparse_apply_adagrad(v, s[0], c(0.1), g, i), 1),
    "rmsprop": (lambda v, s, g, i, c: training_ops.sparse_apply_rms_prop(v, s[0], s[1], c(0.01), c(0.9), c(0.5),
                                                                         c(1e-3), g, i), 2),
    "ftrl": (lambda v, s, g, i, c: training_ops.sparse_apply_ftrl(v, s[0], s[1], g, i, c(0.1), c(0.01), c(0.02),
                                                                  c(-0.5)), 2),
    "ftrl-power": (lambda v, s, g, i, c: training_ops.sparse_apply_ftrl(v, s[0], s[1], g, i, c(0.1), c(0.01),
                                                                        c(0.02), c(-0.7)), 2),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(SPARSE_APPLY))
def test_sparse_apply_with_repeated_indices_matches_the_cpu(name, dtype):
    fn, n_slots = SPARSE_APPLY[name]
    var0 = RNG.standard_normal((6, 3)).astype(dtype)
    slots0 = [np.abs(RNG.standard_normal((6, 3))).astype(dtype) + 0.1 for _ in range(n_slots)]
    grad = RNG.standard_normal((4, 3)).astype(dtype)
    idx = np.array([4, 1, 4, 5], np.int64)  # a repeated index is applied twice, in order

    def build():
        v = tw.Variable(var0, name="var")
        slots = [tw.Variable(s, name=f"slot{k}") for k, s in enumerate(slots0)]
        out = fn(v, slots, tw.constant(grad), tw.constant(idx), lambda x: tw.constant(x, tw.as_dtype(dtype)))
        return out, [v.read_value()] + [s.read_value() for s in slots]
    dev, cpu = _on_both(build, steps=2)
    _same(dev, cpu)


# ---------------------------------------------------------------------------------------
# end to end: an embedding table on the device trained with sparse gradients
OPTIMIZERS = {
    "gd": lambda: tw.train.GradientDescentOptimizer(0.5),
    "adagrad": lambda: tw.train.AdagradOptimizer(0.5),
    "momentum": lambda: tw.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tw.train.AdamOptimizer(0.05),
    "rmsprop": lambda: tw.train.RMSPropOptimizer(0.05, momentum=0.5),
    "ftrl": lambda: tw.train.FtrlOptimizer(0.1),
}


def _train(dev, make_opt, vocab=50, shards=1, steps=4):
    rng = np.random.default_rng(5)
    table = rng.standard_normal((vocab, 4)).astype(np.float32)
    batches = [rng.integers(0, vocab, 12).astype(np.int32) for _ in range(steps)]
    g = tw.Graph()
    with g.as_default(), tw.device(dev):
        if shards == 1:
            params = tw.Variable(table, name="emb")
            variables = [params]
        else:
            variables = [tw.Variable(table[k::shards], name=f"emb{k}") for k in range(shards)]  # "mod" sharding
            params = variables
        ids = tw.placeholder(tw.int32, [None])
        y = tw.nn.embedding_lookup(params, ids)
        loss = tw.reduce_sum(tw.square(y - 1.0))
        step = make_opt().minimize(loss)
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as sess:
        sess.run(init)
        md = tw.RunMetadata()
        losses = [sess.run([loss, step], {ids: b}, run_metadata=md)[0] for b in batches]
        return losses, sess.run(variables), md.placement


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_embedding_training_on_the_device_matches_the_cpu(name):
    dev_losses, dev_vars, placement = _train(OPENCL0, OPTIMIZERS[name])
    cpu_losses, cpu_vars, _ = _train(CPU0, OPTIMIZERS[name])
    elsewhere = {n: d for n, d in placement.items() if "OPENCL" not in d}
    assert not elsewhere, f"nodes not placed on OPENCL: {elsewhere}"
    np.testing.assert_allclose(dev_losses, cpu_losses, rtol=1e-5)
    for a, b in zip(dev_vars, cpu_vars):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert dev_losses[-1] < dev_losses[0]


def test_partitioned_embedding_training_on_the_device_matches_the_cpu():
    """Two shards: DynamicPartition, a Gather per shard, ParallelDynamicStitch, and a sparse
    update per shard, all on OPENCL."""
    dev_losses, dev_vars, placement = _train(OPENCL0, OPTIMIZERS["adagrad"], vocab=31, shards=2)
    cpu_losses, cpu_vars, _ = _train(CPU0, OPTIMIZERS["adagrad"], vocab=31, shards=2)
    assert all("OPENCL" in d for d in placement.values())
    np.testing.assert_allclose(dev_losses, cpu_losses, rtol=1e-5)
    for a, b in zip(dev_vars, cpu_vars):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _step_bytes(make_opt, vocab, batch=64, dim=32):
    """Bytes the OPENCL allocator had in use at the peak of a warm training step, beyond
    what was in use before it. (Tables of 64 KiB and more: the executor keeps smaller
    variable reads to the end of the step, and the update then copies the small table.)"""
    rng = np.random.default_rng(3)  # the same ids at every vocabulary size: the same work
    g = tw.Graph()
    with g.as_default(), tw.device(OPENCL0):
        v = tw.Variable(np.zeros((vocab, dim), np.float32), name="emb")
        ids = tw.placeholder(tw.int32, [batch])
        loss = tw.reduce_sum(tw.square(tw.gather(v, ids) - 1.0))
        step = make_opt().minimize(loss)
        init = tw.global_variables_initializer()
    with tw.Session(graph=g) as sess:
        sess.run(init)
        sess.run(step, {ids: rng.integers(0, 500, batch)})  # warm: plans built, copy-on-write done
        buf = _store(sess, "emb").value.buf
        dev = next(d for d in sess.devices if d.device_type == "OPENCL")
        start = dev.allocator.bytes_in_use
        dev.allocator.reset_peak()
        meta = tw.RunMetadata()
        sess.run(step, {ids: rng.integers(0, 500, batch)}, run_metadata=meta)
        assert _store(sess, "emb").value.buf is buf, "the table was rewritten, not updated in place"
        return meta.allocator_stats[dev.name]["peak_bytes_in_use"] - start


@pytest.mark.parametrize("name", ["gd", "adagrad", "momentum"])
def test_a_sparse_step_allocates_the_same_at_any_vocabulary_size(name):
    small = _step_bytes(OPTIMIZERS[name], 1000)
    large = _step_bytes(OPTIMIZERS[name], 100_000)
    assert 0 < small and large <= small + 1024, f"a step allocated {large} bytes at vocab 1e5 but {small} at 1e3"
    assert large < 100_000 * 32 * 4 // 20
