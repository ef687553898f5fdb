"""FileWriter: the event files TensorBoard's own EventAccumulator reads back (summaries, the
graph with devices, run metadata), the file format, the writer thread, errors and crashes."""

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.testing.fake_device import register_fake_devices

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Tests here register FAKE devices; later test files see only the installed plugins
    (in-process servers would otherwise offer FAKE devices to their placers)."""
    yield
    if "FAKE" in plugins.registry().device_factories:
        plugins._reset_for_tests()

FAKE0 = "/device:FAKE:0"


def events(path):
    return [tw.summary.Event.FromString(r) for r in tw.python_io.tf_record_iterator(path)]


def event_files(logdir):
    return sorted(os.path.join(logdir, f) for f in os.listdir(logdir) if "tfevents" in f)


def accumulator(logdir):
    acc = ea.EventAccumulator(str(logdir), size_guidance={k: 0 for k in (
        ea.SCALARS, ea.HISTOGRAMS, ea.IMAGES, ea.AUDIO, ea.TENSORS, ea.COMPRESSED_HISTOGRAMS)})
    acc.Reload()
    return acc


def test_event_file_name_and_first_event(tmp_path):
    logdir = tmp_path / "run"  # created by the writer
    w = tw.summary.FileWriter(logdir, filename_suffix=".v1")
    w.add_summary(tw.summary.scalar_value("x", 1.0), global_step=7)
    w.close()
    (path,) = event_files(logdir)
    name = os.path.basename(path)
    prefix, stamp, rest = name[:len("events.out.tfevents.")], name.split(".")[3], name.split(".", 4)[4]
    assert prefix == "events.out.tfevents." and len(stamp) == 10 and abs(int(stamp) - time.time()) < 600
    assert rest == socket.gethostname() + ".v1" and w.get_logdir() == str(logdir)
    first, second = events(path)
    assert first.file_version == "brain.Event:2" and first.wall_time > 0
    assert second.step == 7 and second.summary.value[0].simple_value == 1.0


def _small_model():
    """A tiny regression trained with every kind of summary; returns what the tests check."""
    register_fake_devices(count=1)
    x = tw.placeholder(tw.float32, [None, 2], name="x")
    y = tw.placeholder(tw.float32, [None, 1], name="y")
    with tw.name_scope("model"):
        w = tw.Variable(tw.zeros([2, 1]), name="w")
        with tw.device(FAKE0):
            pred = tw.matmul(x, w)
        loss = tw.reduce_mean(tw.square(pred - y))
    train = tw.train.GradientDescentOptimizer(0.1).minimize(loss)
    tw.summary.scalar("loss", loss)
    tw.summary.histogram("weights", w)
    tw.summary.image("input", tw.reshape(x, [-1, 1, 2, 1]), max_outputs=2)
    tw.summary.audio("sound", tw.reshape(tw.tanh(x), [-1, 2]), 4000, max_outputs=1)
    tw.summary.text("note", tw.constant("step *done*"))
    return x, y, train, loss, tw.summary.merge_all()


def test_tensorboard_reads_every_kind(tmp_path):
    x, y, train, loss, merged = _small_model()
    xs = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    ys = xs @ np.array([[0.5], [-0.25]], np.float32)
    with tw.Session() as sess:
        sess.run(tw.global_variables_initializer())
        placement = sess.placement([train, merged], {x: None, y: None})
        w = tw.summary.FileWriter(tmp_path, sess.graph)
        w.add_graph(sess.graph, placement=placement)  # the later graph event is the one shown
        losses = []
        for step in range(3):
            md = tw.RunMetadata()
            opts = tw.RunOptions(trace_level=tw.RunOptions.FULL_TRACE) if step == 2 else None
            _, lv, s = sess.run([train, loss, merged], {x: xs, y: ys}, options=opts, run_metadata=md)
            losses.append(float(lv))
            w.add_summary(s, step)
        w.add_run_metadata(md, "step2", 2)
        w.close()

    acc = accumulator(tmp_path)
    tags = acc.Tags()
    assert tags["scalars"] == ["loss"] and tags["histograms"] == ["weights"]
    assert tags["images"] == ["input/image/0", "input/image/1"] and tags["audio"] == ["sound/audio"]
    assert tags["tensors"] == ["note"] and tags["graph"] and tags["run_metadata"] == ["step2"]
    scalars = acc.Scalars("loss")
    assert [e.step for e in scalars] == [0, 1, 2]
    assert [e.value for e in scalars] == pytest.approx(losses)
    h = acc.Histograms("weights")[-1].histogram_value
    assert h.num == 2 and sum(h.bucket) == 2
    img = acc.Images("input/image/1")[0]
    assert (img.width, img.height) == (2, 1) and img.encoded_image_string.startswith(b"\x89PNG")
    au = acc.Audio("sound/audio")[0]
    assert au.content_type == "audio/wav" and au.sample_rate == 4000 and au.length_frames == 2
    assert tensor_util.make_ndarray(acc.Tensors("note")[0].tensor_proto) == b"step *done*"
    assert acc.SummaryMetadata("note").plugin_data.plugin_name == "text"

    nodes = {n.name: n for n in acc.Graph().node}
    mm = nodes["model/MatMul"]
    assert mm.op == "MatMul" and list(mm.input) == ["x", "model/w/read"] and "FAKE:0" in mm.device
    assert "CPU:0" in nodes["loss"].device and nodes["loss"].op == "ScalarSummary"
    assert [d.size for d in mm.attr["_output_shapes"].list.shape[0].dim] == [-1, 1]
    assert mm.attr["T"].type == 1  # DT_FLOAT
    assert any(i.startswith("^") for n in nodes.values() for i in n.input)  # control inputs kept

    md = acc.RunMetadata("step2")
    stats = {ns.node_name: (ds.device, ns) for ds in md.step_stats.dev_stats for ns in ds.node_stats}
    dev, ns = stats["model/MatMul"]
    assert "FAKE" in dev and ns.all_start_micros > 1e15 and ns.all_end_rel_micros >= 0
    assert abs(ns.all_start_micros / 1e6 - time.time()) < 600   # on the wall clock
    assert ns.memory[0].total_bytes == 12 and ns.output[0].tensor_description.allocation_description.requested_bytes == 12


def test_graph_conversion_attrs_inputs_and_placement():
    a = tw.constant(np.array([[1.5, 2.0]], np.float32), name="a")
    b = tw.placeholder(tw.int64, None, name="b")
    s = tw.split(a, 2, axis=1, name="s")
    with tw.control_dependencies([b]):
        c = tw.add(s[1], s[0], name="c")
    del c
    gdef = tw.summary.graph_def_proto(tw.get_default_graph(), placement={"c": "/job:w/task:1/device:CPU:0"})
    nodes = {n.name: n for n in gdef.node}
    assert list(nodes["c"].input) == ["s:1", "s", "^b"] and nodes["c"].device == "/job:w/task:1/device:CPU:0"
    assert tensor_util.make_ndarray(nodes["a"].attr["value"].tensor).tolist() == [[1.5, 2.0]]
    assert nodes["a"].attr["dtype"].type == 1 and nodes["b"].attr["dtype"].type == 9  # DT_FLOAT, DT_INT64
    assert nodes["b"].attr["_output_shapes"].list.shape[0].unknown_rank
    assert nodes["s"].attr["num_split"].i == 2 and len(nodes["s"].attr["_output_shapes"].list.shape) == 2
    # our dict GraphDef converts the same way
    assert tw.summary.graph_def_proto(tw.get_default_graph().as_graph_def(add_shapes=True)).node[0].name == "a"
    with pytest.raises(tw.errors.InvalidArgumentError, match="add_graph takes a tw.Graph"):
        tw.summary.graph_def_proto(42)


def test_graph_nodes_outside_the_placement_name_the_placed_device():
    # A fed placeholder is not placed; its requested "/device:CPU:0" is spelled as the one placed
    # device it matches, so the dashboard shows one colour per device, not one per spelling.
    with tw.device("/device:CPU:0"):
        x = tw.placeholder(tw.float32, [None, 2], name="x")
        m = tw.reduce_mean(x * 2.0, name="m")
    with tw.device("/device:CPU:1"):
        tw.placeholder(tw.float32, [], name="elsewhere")  # matches no placed device: kept as written
    with tw.Session(config=tw.ConfigProto(device_count={"CPU": 2})) as sess:
        placement = sess.placement([m], {x: [[1.0, 2.0]]})
    nodes = {n.name: n for n in tw.summary.graph_def_proto(tw.get_default_graph(), placement).node}
    assert "x" not in placement
    assert nodes["x"].device == nodes["m"].device == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert nodes["elsewhere"].device == "/device:CPU:1"


def test_step_stats_forms():
    now, t0 = time.time(), time.perf_counter()
    flat = [{"node": "n1", "op": "Add", "device": "/cpu:0", "start": t0, "end": t0 + 0.5, "output_bytes": 8}]
    nested = SimpleNamespace(dev_stats=[SimpleNamespace(
        device="/gpu:0", thread_names={7: "worker"},
        node_stats=[{"node_name": "n2", "op": "MatMul", "all_start_nanos": int(now * 1e9), "op_start_rel_nanos": 1000,
                     "op_end_rel_nanos": 4000, "all_end_rel_nanos": 5000, "thread_id": 7,
                     "output": [{"slot": 0, "bytes": 16, "dtype": "float32", "shape": [2, 2]}],
                     "memory": [{"allocator_name": "gpu_pool", "allocator_bytes_in_use": 99, "peak_bytes": 120}]}])])
    md = tw.summary.run_metadata_proto(SimpleNamespace(step_stats=flat, partition_graphs=[]))
    (ds,) = md.step_stats.dev_stats
    (ns,) = ds.node_stats
    assert (ds.device, ns.node_name, ns.all_end_rel_micros, ns.timeline_label) == ("/cpu:0", "n1", 500000, "n1 = Add()")
    assert abs(ns.all_start_micros / 1e6 - now) < 60 and ns.memory[0].total_bytes == 8
    md = tw.summary.run_metadata_proto(SimpleNamespace(step_stats=nested))
    (ds,) = md.step_stats.dev_stats
    (ns,) = ds.node_stats
    assert ds.thread_names[7] == "worker" and ns.thread_id == 7
    assert (ns.all_start_nanos, ns.op_start_rel_micros, ns.op_end_rel_micros, ns.all_end_rel_micros) == (
        int(now * 1e9), 1, 4, 5)
    out = ns.output[0].tensor_description
    assert out.dtype == 1 and [d.size for d in out.shape.dim] == [2, 2] and out.allocation_description.requested_bytes == 16
    assert (ns.memory[0].allocator_name, ns.memory[0].total_bytes, ns.memory[0].allocator_bytes_in_use,
            ns.memory[0].peak_bytes) == ("gpu_pool", 16, 99, 120)


def test_plugin_metadata_written_once_per_tag_and_add_summary_inputs(tmp_path):
    t = tw.summary.text("t", tw.constant("hi"))
    with tw.Session() as sess:
        s = sess.run(t)
    with tw.summary.FileWriter(tmp_path) as w:
        w.add_summary(s, 1)
        w.add_summary(np.array(s, dtype=object), 2)
        w.add_summary(tw.summary.Summary.FromString(s), 3)
        for bad in ("text", [s], np.array([s, s], dtype=object), b"\xff\xff"):
            with pytest.raises(tw.errors.InvalidArgumentError, match="add_summary"):
                w.add_summary(bad)
        w.add_session_log(tw.summary.SessionLog(status=tw.summary.SessionLog.START), 0)
    evs = events(event_files(tmp_path)[0])
    meta = [e.summary.value[0].HasField("metadata") for e in evs if e.HasField("summary")]
    assert meta == [True, False, False]
    assert evs[-1].session_log.status == tw.summary.SessionLog.START


def test_run_metadata_tag_once(tmp_path):
    with tw.summary.FileWriter(tmp_path) as w:
        w.add_run_metadata(tw.RunMetadata(), "a")
        with pytest.raises(tw.errors.InvalidArgumentError, match="tag 'a' was already used"):
            w.add_run_metadata(tw.RunMetadata(), "a")


def test_close_reopen_and_the_writer_thread(tmp_path, caplog):
    w = tw.summary.FileWriter(tmp_path, max_queue=2)
    first = w.event_writer.path
    for i in range(50):  # more than the queue holds: the caller waits for the thread
        w.add_summary(tw.summary.scalar_value("x", i), i)
    # the thread writes without being asked to flush

    def complete_events():  # while the thread writes, the file may end inside a record
        try:
            return len(events(first))
        except tw.errors.DataLossError:
            return 0
    deadline = time.monotonic() + 30
    while complete_events() < 51 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(events(first)) == 51
    w.close()
    w.close()  # twice is fine
    w.add_summary(tw.summary.scalar_value("x", -1.0), 99)
    assert "closed" in caplog.text
    w.reopen()
    w.add_summary(tw.summary.scalar_value("x", 100.0), 100)
    w.flush()
    second = w.event_writer.path
    w.close()
    assert second != first and event_files(tmp_path) == sorted([first, second])
    assert [e.step for e in events(second)] == [0, 100] and events(second)[0].file_version == "brain.Event:2"
    assert [e.value for e in accumulator(tmp_path).Scalars("x")][-1] == 100.0


def test_writers_share_nothing_and_threads_end(tmp_path):
    before = threading.active_count()
    writers = [tw.summary.FileWriter(tmp_path) for _ in range(3)]  # same second: distinct files
    for w in writers:
        w.close()
    assert len(event_files(tmp_path)) == 3 and threading.active_count() == before


def test_file_writer_cache(tmp_path):
    tw.constant(1.0, name="in_the_default_graph")
    try:
        a = tw.summary.FileWriterCache.get(tmp_path / "c")
        assert tw.summary.FileWriterCache.get(tmp_path / "c") is a
        assert tw.summary.FileWriterCache.get(str(tmp_path / "c")) is a
        a.flush()
        (path,) = event_files(tmp_path / "c")
        (graph_event,) = [e for e in events(path) if e.graph_def]
        assert b"in_the_default_graph" in graph_event.graph_def
    finally:
        tw.summary.FileWriterCache.clear()
    assert tw.summary.FileWriterCache.get(tmp_path / "c") is not a
    tw.summary.FileWriterCache.clear()


def test_unusable_log_directories(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(tw.errors.FailedPreconditionError, match=f"'{f}'.*not a directory"):
        tw.summary.FileWriter(f)
    with pytest.raises(tw.errors.FailedPreconditionError, match=f"cannot create the log directory '{f}/sub'"):
        tw.summary.FileWriter(f / "sub")
    with pytest.raises(tw.errors.UnimplementedError, match="not a local directory"):
        tw.summary.FileWriter("gs://bucket/logs")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(tw.errors.PermissionDeniedError, match=f"'{ro}"):
            tw.summary.FileWriter(ro)
        with pytest.raises(tw.errors.PermissionDeniedError, match=f"'{ro}/sub'"):
            tw.summary.FileWriter(ro / "sub")
    finally:
        ro.chmod(0o700)


def test_permission_denied_and_a_full_disk(tmp_path, monkeypatch):
    from tensorweave.summary import writer as writer_module

    real_open = os.open

    def deny(path, *args, **kw):
        if str(path).startswith(str(tmp_path / "denied")):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kw)

    (tmp_path / "denied").mkdir()
    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(tw.errors.PermissionDeniedError, match=f"cannot create the event file '{tmp_path}/denied/events"):
        tw.summary.FileWriter(tmp_path / "denied")
    monkeypatch.undo()

    w = tw.summary.FileWriter(tmp_path / "full")

    def no_space(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_module, "_write_all", no_space)
    w.add_summary(tw.summary.scalar_value("x", 1.0))
    with pytest.raises(tw.errors.ResourceExhaustedError, match=f"cannot write to the event file '{tmp_path}/full/events.*No space"):
        w.flush()
    monkeypatch.undo()
    w.add_summary(tw.summary.scalar_value("x", 2.0))  # the failed file takes nothing more, silently
    w.flush()
    w.close()
    assert len(events(w.event_writer.path)) == 1
    w.reopen()
    w.add_summary(tw.summary.scalar_value("x", 3.0))
    w.close()
    assert [e.summary.value[0].simple_value for e in events(w.event_writer.path)[1:]] == [3.0]


_CRASHING_WRITER = """
import sys
import tensorweave as tw
w = tw.summary.FileWriter(sys.argv[1])
for i in range(5):
    w.add_summary(tw.summary.scalar_value("x", float(i)), i)
w.flush()
print("flushed", flush=True)
i = 5
while True:  # killed somewhere in here, records of ~1 KiB in flight
    w.add_summary(tw.summary.scalar_value("y" * 1000, float(i)), i)
    i += 1
"""


def test_a_killed_writer_leaves_its_events_readable(tmp_path):
    core = os.path.dirname(os.path.dirname(tw.__file__))
    env = dict(os.environ, PYTHONPATH=core + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _CRASHING_WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(60)
        assert line == ["flushed\n"], proc.stderr.read() if proc.poll() is not None else "no output in 60 s"
        # let it write a while, then kill it mid-stream (no clean-up of any kind runs)
        (path,) = event_files(tmp_path)
        deadline = time.monotonic() + 30
        while os.path.getsize(path) < 200_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    evs = events(path)  # every record whole: no DataLossError
    assert evs[0].file_version == "brain.Event:2" and len(evs) > 100
    assert [e.step for e in evs[1:]] == list(range(len(evs) - 1))
    assert [e.value for e in accumulator(tmp_path).Scalars("x")] == [0.0, 1.0, 2.0, 3.0, 4.0]
