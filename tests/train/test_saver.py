"""tw.train.Saver, checkpoint management, crash safety (a process killed mid-save),
all-or-nothing restore, hooks and MonitoredTrainingSession."""

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.train import checkpoint_format as cf
from tensorweave.train import saver as saver_mod


def every_dtype():
    """One value per tensorweave dtype, with 0-d and empty tensors (as in test_checkpoint_format)."""
    vals = {
        "f16": np.array([[1.5, -2.0]], np.float16), "f32": np.array([0.25, 1e30], np.float32),
        "f64": np.array(np.pi), "i8": np.array([-128, 127], np.int8), "i16": np.array([[-3], [3]], np.int16),
        "i32": np.array(2**31 - 1, np.int32), "i64": np.array([2**62], np.int64), "u8": np.arange(3, dtype=np.uint8),
        "u16": np.array([65535], np.uint16), "u32": np.array([2**32 - 1], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64), "bool": np.array([True, False]), "bool0": np.array(True),
        "c64": np.array([1 + 2j, -3j], np.complex64), "c128": np.array(1.5 - 2.5j),
        "str": np.array([[b"a", b""], [b"\x00\xff", "\u00e9".encode()]], dtype=object),
        "str0": np.array(b"scalar", dtype=object), "str_empty": np.zeros((0, 2), dtype=object),
        "empty_f32": np.zeros((0, 5), np.float32), "empty_c64": np.zeros((2, 0), np.complex64),
    }
    dts = {k: tw.string if v.dtype == object else tw.as_dtype(v.dtype) for k, v in vals.items()}
    return vals, dts


def assert_same(got, want):
    if want.ndim == 0:  # fetched scalars are NumPy scalars, a string scalar is bytes (TF1)
        assert type(got) is (bytes if want.dtype == object else want.dtype.type), type(got)
        got = np.array(got, dtype=want.dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(got, want)


def make_vars(vals, dts):
    return {k: tw.Variable(tw.constant(v, dtype=dts[k]), name=k) for k, v in vals.items()}


def test_every_dtype_round_trips_through_saver_into_a_fresh_graph(tmp_path):
    vals, dts = every_dtype()
    make_vars(vals, dts)
    step = tw.train.get_or_create_global_step()
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        sess.run(tw.assign(step, 7))
        path = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
    assert path == str(tmp_path / "model.ckpt-7")
    assert tw.train.latest_checkpoint(str(tmp_path)) == path
    assert cf.CheckpointReader(path).global_step == 7

    with tw.Graph().as_default():
        # same variables, initial values that differ everywhere: restore must overwrite all
        zeros = {k: (np.zeros_like(v) if v.dtype != object else np.full(v.shape, b"?", dtype=object))
                 for k, v in vals.items()}
        vs = make_vars(zeros, dts)
        step2 = tw.train.get_or_create_global_step()
        saver2 = tw.train.Saver()
        with tw.Session() as sess:
            saver2.restore(sess, path)       # no initializer: restore gives every value
            got = sess.run({k: v.value() for k, v in vs.items()})
            assert sess.run(step2) == 7
    for k, want in vals.items():
        assert_same(got[k], want)
    names = [n for n, _ in tw.train.list_variables(str(tmp_path))]
    assert names == sorted(list(vals) + ["global_step"])
    assert_same(tw.train.load_variable(path, "str:0"), vals["str"])


def test_save_and_restore_ops_are_built_once(tmp_path):
    v = tw.Variable([1.0, 2.0], name="v")
    saver = tw.train.Saver()
    g = tw.get_default_graph()
    with tw.Session() as sess:
        sess.run(v.initializer)
        saver.save(sess, str(tmp_path / "a"))
        n_ops = len(g.get_operations())
        for i in range(3):
            saver.save(sess, str(tmp_path / "a"), global_step=i)
            saver.restore(sess, str(tmp_path / f"a-{i}"))
        assert len(g.get_operations()) == n_ops
    types = [op.type for op in g.get_operations()]
    assert types.count("SaveV2") == 1 and types.count("RestoreV2") == 1


def test_max_to_keep_deletes_old_files_and_the_state_file_follows(tmp_path):
    v = tw.Variable(0, name="v")
    inc = tw.assign_add(v, 1)
    saver = tw.train.Saver(max_to_keep=2)
    prefix = str(tmp_path / "model.ckpt")
    with tw.Session() as sess:
        sess.run(v.initializer)
        for step in range(1, 6):
            sess.run(inc)
            saver.save(sess, prefix, global_step=step)
    assert saver.last_checkpoints == [f"{prefix}-4", f"{prefix}-5"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-4.index.json", "model.ckpt-4.safetensors",
                                            "model.ckpt-5.index.json", "model.ckpt-5.safetensors"]
    state = tw.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == f"{prefix}-5"
    assert state.all_model_checkpoint_paths == [f"{prefix}-4", f"{prefix}-5"]
    assert tw.train.latest_checkpoint(str(tmp_path)) == f"{prefix}-5"
    assert tw.train.load_variable(str(tmp_path), "v") == 5
    assert not tw.train.checkpoint_exists(f"{prefix}-3") and tw.train.checkpoint_exists(f"{prefix}-4")
    # the newest checkpoint deleted by hand: latest_checkpoint falls back to the newest left
    tw.train.remove_checkpoint(f"{prefix}-5")
    assert tw.train.latest_checkpoint(str(tmp_path)) == f"{prefix}-4"


def test_max_to_keep_none_keeps_everything_and_recover_last_checkpoints(tmp_path):
    v = tw.Variable(1.0, name="v")
    keep_all = tw.train.Saver(max_to_keep=None)
    with tw.Session() as sess:
        sess.run(v.initializer)
        for step in range(4):
            keep_all.save(sess, str(tmp_path / "m"), global_step=step)
        assert len(glob.glob(str(tmp_path / "m-*.index.json"))) == 4
        assert tw.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == [str(tmp_path / "m-3")]
        # a restarted job adopts the existing checkpoints, then max_to_keep applies to them
        saver = tw.train.Saver(max_to_keep=2)
        saver.recover_last_checkpoints([str(tmp_path / f"m-{i}") for i in range(5)])   # m-4 does not exist
        assert saver.last_checkpoints == [str(tmp_path / f"m-{i}") for i in range(4)]
        saver.save(sess, str(tmp_path / "m"), global_step=9)
    assert sorted(glob.glob(str(tmp_path / "m-*.index.json"))) == [str(tmp_path / "m-3.index.json"),
                                                                 str(tmp_path / "m-9.index.json")]


def test_keep_checkpoint_every_n_hours_preserves_one_per_period(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(saver_mod, "_now", lambda: clock[0])
    v = tw.Variable(1.0, name="v")
    saver = tw.train.Saver(max_to_keep=1, keep_checkpoint_every_n_hours=1.0)
    with tw.Session() as sess:
        sess.run(v.initializer)
        for step in range(6):            # a save every 30 minutes: 0, 0.5h, 1h, ..., 2.5h
            saver.save(sess, str(tmp_path / "m"), global_step=step)
            clock[0] += 1800
    left = sorted(int(p.split("-")[-1].split(".")[0]) for p in glob.glob(str(tmp_path / "m-*.index.json")))
    # kept: the last (max_to_keep=1) plus the first checkpoint at least 1h, then 2h, after the Saver was made
    assert left == [2, 4, 5]


def test_relative_paths_survive_moving_the_directory(tmp_path):
    v = tw.Variable([3.0], name="v")
    saver = tw.train.Saver(save_relative_paths=True)
    (tmp_path / "a").mkdir()
    with tw.Session() as sess:
        sess.run(v.initializer)
        saver.save(sess, str(tmp_path / "a" / "m"), global_step=1)
    state = json.loads((tmp_path / "a" / "checkpoint").read_text())
    assert state["model_checkpoint_path"] == "m-1" and state["all_model_checkpoint_paths"] == ["m-1"]
    os.rename(tmp_path / "a", tmp_path / "b")
    assert tw.train.latest_checkpoint(str(tmp_path / "b")) == str(tmp_path / "b" / "m-1")
    assert tw.train.load_variable(str(tmp_path / "b"), "v").tolist() == [3.0]


def test_var_list_as_dict_or_list_restore_sequentially_and_custom_state_file(tmp_path):
    a = tw.Variable([1.0, 2.0], name="a")
    b = tw.Variable(5, name="b")
    saver = tw.train.Saver({"renamed/a": a, "b": b}, restore_sequentially=True)
    only_a = tw.train.Saver([a])
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        p = saver.save(sess, str(tmp_path / "m"), latest_filename="my_state")
        assert tw.train.latest_checkpoint(str(tmp_path), "my_state") == p
        assert tw.train.latest_checkpoint(str(tmp_path)) is None
        assert [n for n, _ in tw.train.list_variables(p)] == ["b", "renamed/a"]
        sess.run([a.assign([0.0, 0.0]), b.assign(0)])
        saver.restore(sess, p)
        assert sess.run(a).tolist() == [1.0, 2.0] and sess.run(b) == 5
        with pytest.raises(tw.errors.NotFoundError, match="variable 'a' is not in it"):
            only_a.restore(sess, p)
    with pytest.raises(tw.errors.InvalidArgumentError, match="same name: a"):
        tw.train.Saver([a, a])
    with pytest.raises(tw.errors.InvalidArgumentError, match="can only save variables"):
        tw.train.Saver([a.value()])
    with pytest.raises(tw.errors.InvalidArgumentError, match="latest_filename"):
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            saver.save(sess, str(tmp_path / "m"), latest_filename="sub/state")


def test_empty_and_deferred_savers():
    with pytest.raises(tw.errors.InvalidArgumentError, match="no variables to save"):
        tw.train.Saver()
    empty = tw.train.Saver(allow_empty=True)
    deferred = tw.train.Saver([tw.Variable(1.0)], defer_build=True)
    with tw.Session() as sess:
        assert empty.save(sess, "unused") is None
        with pytest.raises(tw.errors.FailedPreconditionError, match="build"):
            deferred.save(sess, "unused")


def test_missing_directory_and_missing_checkpoint(tmp_path):
    v = tw.Variable(1.0, name="v")
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(v.initializer)
        with pytest.raises(tw.errors.NotFoundError, match="parent directory"):
            saver.save(sess, str(tmp_path / "nope" / "m"))
        with pytest.raises(tw.errors.NotFoundError, match="does not exist"):
            saver.restore(sess, str(tmp_path / "m"))
        with pytest.raises(tw.errors.InvalidArgumentError, match="None"):
            saver.restore(sess, None)
    with pytest.raises(tw.errors.NotFoundError, match="no checkpoint"):
        tw.train.list_variables(str(tmp_path))


def test_malformed_slice_specs_are_rejected_clearly():
    from tensorweave.ops import checkpoint_ops

    with pytest.raises(tw.errors.InvalidArgumentError, match="outside"):
        checkpoint_ops.restore_v2("p", ["a"], ["4 3,2"], [tw.float32])
    with pytest.raises(tw.errors.InvalidArgumentError, match="slices for a full shape of rank"):
        checkpoint_ops.restore_v2("p", ["a"], ["4 2 0,2"], [tw.float32])
    slices = tw.placeholder(tw.string, [1])
    t = checkpoint_ops.restore_v2("p", ["a"], slices, [tw.float32])
    with tw.Session() as sess:
        with pytest.raises(tw.errors.InvalidArgumentError, match="tensor 'a' has shape_and_slices '4 x,2'"):
            sess.run(t, {slices: ["4 x,2"]})


# ---------------------------------------------------------------------------------------
# bad checkpoints: clear errors, and no variable modified
def _saved_model(tmp_path):
    tw.Variable(np.ones((2, 3), np.float32), name="a")
    tw.Variable(np.arange(4), name="b")
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        return saver.save(sess, str(tmp_path / "good"))


def _fresh_model(shape_a=(2, 3), with_c=False, dtype_b=np.int64):
    """A new graph whose variables hold sentinel values; returns (graph, vars, saver)."""
    g = tw.Graph()
    with g.as_default():
        vs = {"a": tw.Variable(np.full(shape_a, 7, np.float32), name="a"),
              "b": tw.Variable(np.full(4, 7, dtype_b), name="b")}
        if with_c:
            vs["c"] = tw.Variable(7.0, name="c")
        saver = tw.train.Saver()
    return g, vs, saver


def _assert_untouched(sess, vs):
    for v in vs.values():
        assert (sess.run(v) == 7).all(), v.name


@pytest.mark.parametrize("kind", ["missing", "shape", "dtype", "truncated", "checksum"])
def test_failed_restore_names_the_problem_and_modifies_nothing(tmp_path, kind):
    path = _saved_model(tmp_path)
    g, vs, saver = _fresh_model(shape_a=(3, 2) if kind == "shape" else (2, 3), with_c=kind == "missing",
                                dtype_b=np.int32 if kind == "dtype" else np.int64)
    data = tmp_path / "good.safetensors"
    if kind == "truncated":
        data.write_bytes(data.read_bytes()[:-10])
    if kind == "checksum":
        raw = bytearray(data.read_bytes())
        raw[-1] ^= 1
        data.write_bytes(bytes(raw))
    expected = {
        "missing": (tw.errors.NotFoundError, r"variable 'c' is not in it.*no variable was modified"),
        "shape": (tw.errors.InvalidArgumentError, r"variable 'a' has shape \(3, 2\) but the checkpoint holds "
                                                  r"shape \[2, 3\]"),
        "dtype": (tw.errors.InvalidArgumentError, "variable 'b' has dtype int32 but the checkpoint holds int64"),
        "truncated": (tw.errors.DataLossError, "truncated"),
        "checksum": (tw.errors.DataLossError, "checksum mismatch for tensor"),
    }[kind]
    with tw.Session(graph=g) as sess:
        sess.run([v.initializer for v in vs.values()])
        with pytest.raises(expected[0], match=expected[1]) as e:
            saver.restore(sess, path)
        assert "good.safetensors" in str(e.value)
        _assert_untouched(sess, vs)
        # the graph's restore op alone (no Python-side checks) is all-or-nothing too for
        # what the kernel sees: a missing tensor, a wrong dtype, a damaged file
        if kind in ("missing", "dtype", "truncated", "checksum"):
            with pytest.raises(expected[0]):
                sess.run(saver.restore_op, {saver.filename_tensor: path})
            _assert_untouched(sess, vs)


def test_corrupt_state_file_is_data_loss(tmp_path):
    (tmp_path / "checkpoint").write_text("{oops")
    with pytest.raises(tw.errors.DataLossError, match="checkpoint state file .*checkpoint is corrupt"):
        tw.train.latest_checkpoint(str(tmp_path))


# ---------------------------------------------------------------------------------------
# devices
def test_variables_on_an_opencl_device_save_and_restore(tmp_path):
    if not any(d.device_type == "OPENCL" for d in tw.list_devices()):
        pytest.skip("no OPENCL device (the OpenCL plugin found no platform)")
    with tw.device("/device:OPENCL:0"):
        v = tw.Variable(np.arange(12, dtype=np.float32).reshape(3, 4), name="v")
        step = v.assign_add(tw.ones([3, 4]))
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(v.initializer)
        sess.run(step)
        assert sess.placement(step)["v"].endswith("OPENCL:0")
        p = saver.save(sess, str(tmp_path / "m"))
        sess.run(v.assign(tw.zeros([3, 4])))
        saver.restore(sess, p)
        placement = sess.placement(saver.restore_op)
        assert placement["save/RestoreV2"].endswith("CPU:0") and placement["save/Assign"].endswith("OPENCL:0")
        np.testing.assert_array_equal(sess.run(step), np.arange(12).reshape(3, 4) + 2)
    np.testing.assert_array_equal(tw.train.load_variable(p, "v"), np.arange(12).reshape(3, 4) + 1)


# ---------------------------------------------------------------------------------------
# crash safety: a real process killed with SIGKILL
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import tensorweave as tw
    from tensorweave.train import checkpoint_format as cf

    directory, mode = sys.argv[1], sys.argv[2]
    n = 2048  # two 2048x2048 float64 variables: 64 MiB, eight 8 MiB chunks
    a = tw.Variable(tw.zeros([n, n], tw.float64), name="a")
    b = tw.Variable(tw.zeros([n, n], tw.float64), name="b")
    step = tw.train.get_or_create_global_step()
    saver = tw.train.Saver()
    path = os.path.join(directory, "model.ckpt")
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        saver.save(sess, path, global_step=1 if mode == "new" else None)
        sess.run([tw.assign(a, tw.ones([n, n], tw.float64)), tw.assign(b, tw.ones([n, n], tw.float64)),
                  tw.assign(step, 2)])
        if mode == "new":     # test-only slow path: each chunk takes 50 ms, so the kill lands mid-write
            cf._after_chunk = lambda: time.sleep(0.05)
        else:                 # die between the data file's rename and the index's
            cf._after_data_rename = lambda: os.kill(os.getpid(), signal.SIGKILL)
        saver.save(sess, path, global_step=2 if mode == "new" else None)
    print("save finished", flush=True)
""")


def _spawn(tmp_path, mode):
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=60)


def _load_fresh(path):
    with tw.Graph().as_default():
        a = tw.Variable(tw.zeros([2048, 2048], tw.float64), name="a")
        tw.Variable(tw.zeros([2048, 2048], tw.float64), name="b")
        step = tw.train.get_or_create_global_step()
        saver = tw.train.Saver()
        with tw.Session() as sess:
            saver.restore(sess, path)
            return sess.run(a)[::512, ::512], sess.run(step)


def test_sigkill_in_the_middle_of_a_save_keeps_the_previous_checkpoint(tmp_path):
    proc = _spawn(tmp_path, "new")
    try:
        pattern = str(tmp_path / "model.ckpt-2.safetensors.") + "*" + cf.TEMP_SUFFIX
        deadline = time.monotonic() + 120
        while True:
            temps = glob.glob(pattern)
            if temps and os.path.getsize(temps[0]) > cf.CHUNK_BYTES:   # partly written
                break
            if proc.poll() is not None:
                pytest.fail(f"the child exited ({proc.returncode}) before the save: {proc.communicate()[1][-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the child never started writing checkpoint 2")
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == -signal.SIGKILL
    assert glob.glob(pattern), "the interrupted temp file is left behind, never renamed"
    assert not tw.train.checkpoint_exists(str(tmp_path / "model.ckpt-2"))
    latest = tw.train.latest_checkpoint(str(tmp_path))
    assert latest == str(tmp_path / "model.ckpt-1")
    a, step = _load_fresh(latest)
    assert step == 0 and not a.any()   # the values of save 1 (the step variable was 0 then)


def test_sigkill_between_data_and_index_rename_leaves_a_complete_checkpoint(tmp_path):
    proc = _spawn(tmp_path, "same-prefix")
    try:
        proc.wait(timeout=120)
    finally:
        _reap(proc)
    assert proc.returncode == -signal.SIGKILL
    latest = tw.train.latest_checkpoint(str(tmp_path))
    assert latest == str(tmp_path / "model.ckpt")
    # the index is from save 1, the (complete) data file from save 2: the data file wins
    a, step = _load_fresh(latest)
    assert step == 2 and (a == 1).all()


# ---------------------------------------------------------------------------------------
# hooks and MonitoredTrainingSession
def _model():
    """A tiny regression whose weights after k steps are deterministic."""
    step = tw.train.get_or_create_global_step()
    x = tw.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2))
    y = tw.constant(np.array([[1.0], [2.0], [0.5], [-1.0], [0.0], [3.0]], np.float32))
    w = tw.Variable(tw.zeros([2, 1]), name="w")
    loss = tw.reduce_mean(tw.square(tw.matmul(x, w) - y))
    train = tw.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
    return step, w, train


def _reference_weights(n):
    with tw.Graph().as_default():
        _, w, train = _model()
        with tw.Session() as sess:
            sess.run(tw.global_variables_initializer())
            out = [sess.run(w)]
            for _ in range(n):
                sess.run(train)
                out.append(sess.run(w))
    return out


class Crash(Exception):
    pass


def test_monitored_training_session_resumes_after_a_crash(tmp_path):
    ref = _reference_weights(10)
    ckdir = str(tmp_path / "train")
    with tw.Graph().as_default():
        step, w, train = _model()
        with pytest.raises(Crash):
            with tw.train.MonitoredTrainingSession(checkpoint_dir=ckdir, save_checkpoint_steps=3) as sess:
                assert sess.restored_from is None
                for _ in range(7):
                    sess.run(train)
                raise Crash()   # no end(): the last checkpoint is the one of step 6
    assert tw.train.latest_checkpoint(ckdir) == os.path.join(ckdir, "model.ckpt-6")
    assert sorted(tw.train.get_checkpoint_state(ckdir).all_model_checkpoint_paths) == \
        [os.path.join(ckdir, f"model.ckpt-{i}") for i in (0, 3, 6)]

    with tw.Graph().as_default():
        step, w, train = _model()
        hooks = [tw.train.StopAtStepHook(last_step=10)]
        with tw.train.MonitoredTrainingSession(checkpoint_dir=ckdir, hooks=hooks, save_checkpoint_steps=3) as sess:
            assert sess.restored_from == os.path.join(ckdir, "model.ckpt-6")
            assert sess.run(step) == 6
            np.testing.assert_allclose(sess.run(w), ref[6], rtol=1e-6)
            n = 0
            while not sess.should_stop():
                sess.run(train)
                n += 1
            assert n == 4
            np.testing.assert_allclose(sess.run(w), ref[10], rtol=1e-6)
    # closing normally saved the final step
    assert tw.train.latest_checkpoint(ckdir) == os.path.join(ckdir, "model.ckpt-10")
    np.testing.assert_allclose(tw.train.load_variable(ckdir, "w"), ref[10], rtol=1e-6)


def test_hooks_see_every_run_and_can_stop_it(tmp_path):
    calls = []

    class Recorder(tw.train.SessionRunHook):
        def begin(self):
            calls.append("begin")

        def after_create_session(self, session, coord):
            calls.append("created")

        def before_run(self, run_context):
            return tw.train.SessionRunArgs({"w": w})

        def after_run(self, run_context, run_values):
            calls.append(("after", run_values.results["w"].shape))
            if len(calls) == 4:
                run_context.request_stop()

        def end(self, session):
            calls.append("end")

    step, w, train = _model()
    with tw.train.MonitoredTrainingSession(hooks=[Recorder()]) as sess:
        while not sess.should_stop():
            assert sess.run(train) is None
    assert calls == ["begin", "created", ("after", (2, 1)), ("after", (2, 1)), "end"]
    assert os.listdir(tmp_path) == []


def test_checkpoint_saver_hook_needs_a_global_step_and_secs_xor_steps(tmp_path):
    tw.Variable(1.0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="exactly one"):
        tw.train.CheckpointSaverHook(str(tmp_path), save_secs=1, save_steps=1)
    with pytest.raises(tw.errors.FailedPreconditionError, match="global step"):
        tw.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=1)


def test_restore_or_initialize_reports_variables_left_without_value(tmp_path):
    a = tw.Variable(1.0, name="a")
    saver = tw.train.Saver([a])
    with tw.Session() as sess:
        sess.run(a.initializer)
        saver.save(sess, str(tmp_path / "m"))
    tw.Variable(2.0, name="b")        # not in the checkpoint, and the Saver does not cover it
    scaffold = tw.train.Scaffold(saver=saver)
    with pytest.raises(tw.errors.FailedPreconditionError, match=r"\['b'\] were not restored"):
        tw.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), scaffold=scaffold,
                                          save_checkpoint_secs=None)
