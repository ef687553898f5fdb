"""Which files a worker's ops may touch for remote clients (runtime/file_access.py, the
``[files] allow`` table of a cluster config) and the ``[limits]`` table.

A worker runs graphs that crossed a process boundary: ReadFile, WriteFile, MatchingFiles, the
checkpoint ops, the readers and the file datasets may only use files under the directories
its config allows (default: the directory it was started in); everything else is
PermissionDeniedError naming the node, nothing is written, and the worker keeps serving.
Tested against real worker processes over grpc and ucx, and in process for the default.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distributed import cluster as cl
from tensorweave.distributed.limits import Limits
from tensorweave.distributed.server import Server
from tensorweave.distributed.testing import LocalCluster
from tensorweave.framework import errors
from tensorweave.runtime.file_access import FileAccess

TASK = "/job:worker/task:0"
STEP = tw.RunOptions(timeout_in_ms=30_000)


# ---------------------------------------------------------------------------------------
# the policy itself

@pytest.fixture
def tree(tmp_path):
    """tmp/allowed/{data.txt, sub/more.txt, link -> ../secret.txt}, tmp/secret.txt."""
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "data.txt").write_text("one\ntwo\n")
    (allowed / "sub" / "more.txt").write_text("three\n")
    (tmp_path / "secret.txt").write_text("the secret\n")
    os.symlink(tmp_path / "secret.txt", allowed / "link")
    return tmp_path


def test_paths_under_the_allowed_directories_pass_and_nothing_else(tree):
    fa = FileAccess([tree / "allowed"])
    allowed = tree / "allowed"
    assert fa.check(allowed / "data.txt", "ReadFile") == str(allowed / "data.txt")
    assert fa.allows(allowed / "sub" / "more.txt") and fa.allows(allowed / "new-file")
    assert fa.allows(allowed)
    for bad in (tree / "secret.txt",                     # outside
                allowed / ".." / "secret.txt",           # out through ..
                allowed / "link",                        # a link inside pointing outside
                str(allowed) + "-sibling/x",             # a prefix of the name is not a parent
                "/etc/passwd"):
        assert not fa.allows(bad), bad
        with pytest.raises(errors.PermissionDeniedError, match=r"ReadFile: reading .* is not allowed.*\[files\] allow"):
            fa.check(bad, "ReadFile")
    with pytest.raises(errors.PermissionDeniedError, match="writing"):
        fa.check(tree / "secret.txt", "WriteFile", write=True)
    # the refusal does not tell a remote client which directories are allowed
    with pytest.raises(errors.PermissionDeniedError) as e:
        fa.check("/etc/passwd", "ReadFile")
    assert str(allowed) not in str(e.value)
    assert FileAccess(None).allows("/etc/passwd") and FileAccess(None).unrestricted


def test_glob_refuses_patterns_outside_and_leaves_out_links_that_lead_out(tree):
    fa = FileAccess([tree / "allowed"])
    got = sorted(os.path.basename(p) for p in fa.glob(str(tree / "allowed" / "*"), "MatchingFiles"))
    assert got == ["data.txt", "sub"]  # "link" resolves outside
    with pytest.raises(errors.PermissionDeniedError, match="MatchingFiles"):
        fa.glob(str(tree / "*.txt"), "MatchingFiles")
    with pytest.raises(errors.PermissionDeniedError):
        fa.glob("/etc/*", "MatchingFiles")
    with pytest.raises(errors.PermissionDeniedError):
        fa.glob(str(tree / "allowed" / ".." / "*"), "MatchingFiles")


# ---------------------------------------------------------------------------------------
# configuration: [files] and [limits]

def test_files_and_limits_tables_are_read_validated_and_written_back(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('[cluster]\nworker = ["127.0.0.1:2222"]\n\n[files]\nallow = ["data", "/srv/ckpt"]\n\n'
                    '[limits]\nmax_sessions = 8\nsession_idle_seconds = 30.5\nmax_graph_bytes = 1048576\n')
    config = cl.load_config(path)
    assert config.files_allow == (str(tmp_path / "data"), "/srv/ckpt")  # relative to the file's directory
    assert config.limits == Limits(max_sessions=8, session_idle_seconds=30.5, max_graph_bytes=1 << 20)
    again = tmp_path / "again.toml"
    again.write_text(config.to_toml())
    assert cl.load_config(again) == config
    # defaults: no [files] (the task's working directory), every limit at its default
    plain = cl.config_from_dict({"cluster": {"worker": ["127.0.0.1:2222"]}})
    assert plain.files_allow is None and plain.limits == Limits()
    assert "limits" not in plain.to_dict() and "files" not in plain.to_dict()


@pytest.mark.parametrize("table, match", [
    ({"files": {"allow": "data"}}, r"\[files\] allow: expected a list of directories, got str"),
    ({"files": {"allow": [3]}}, r"\[files\] allow\[0\]: expected a file path string, got int"),
    ({"files": {"allowed": ["x"]}}, r"\[files\]: unknown key 'allowed' \(did you mean 'allow'\?\)"),
    ({"limits": {"max_session": 4}}, r"\[limits\]: unknown key 'max_session' \(did you mean 'max_sessions'\?\)"),
    ({"limits": {"max_steps": 1.5}}, r"\[limits\] max_steps: expected a whole number, got float"),
    ({"limits": {"max_steps": -1}}, r"\[limits\] max_steps: expected a positive number"),
    ({"limits": {"step_idle_seconds": "600"}}, r"\[limits\] step_idle_seconds: expected a number, got str"),
    ({"limits": 5}, r"\[limits\]: expected a table, got int"),
])
def test_bad_files_and_limits_tables_are_clear_errors(table, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        cl.config_from_dict({"cluster": {"worker": ["127.0.0.1:2222"]}, **table}, source="c.toml")


def test_a_server_takes_its_limits_and_files_from_the_config(tmp_path):
    config = cl.config_from_dict({"cluster": {"worker": ["inproc-files:1"]}, "transport": "inproc",
                                  "files": {"allow": [str(tmp_path)]},
                                  "limits": {"max_graphs": 7, "max_sessions": 3}})
    server = Server(config, "worker", 0)
    try:
        assert server.worker.limits.max_graphs == 7 and server.worker.limits.max_sessions == 3
        assert server.worker.resources.file_access.roots == (os.path.realpath(tmp_path),)
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------
# real workers

def _run(target, build):
    g = tw.Graph()
    with g.as_default(), tw.device(TASK):
        out = build()
    with tw.Session(target, graph=g) as sess:
        return sess.run(out, options=STEP)


def _process_transports():
    return sorted(n for n, _ in plugins.registry().transports.items() if n != "inproc")


@pytest.fixture(scope="module", params=_process_transports())
def files_cluster(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"files-{request.param}")
    allowed = base / "allowed"
    (allowed / "sub").mkdir(parents=True)
    (allowed / "data.txt").write_bytes(b"one\ntwo\n")
    (base / "secret.txt").write_bytes(b"the secret\n")
    os.symlink(base / "secret.txt", allowed / "link")
    with LocalCluster({"worker": 1}, request.param, extra={"files": {"allow": [str(allowed)]}}) as c:
        c.start()
        yield c, base


def test_a_worker_reads_and_writes_only_under_its_allowed_directories(files_cluster):
    cluster, base = files_cluster
    allowed = base / "allowed"
    assert _run(cluster.target, lambda: tw.read_file(str(allowed / "data.txt"))) == b"one\ntwo\n"
    _run(cluster.target, lambda: tw.write_file(str(allowed / "sub" / "out.bin"), tw.constant(b"xyz")))
    assert (allowed / "sub" / "out.bin").read_bytes() == b"xyz"

    for path in (base / "secret.txt", allowed / "link", allowed / ".." / "secret.txt"):
        with pytest.raises(errors.PermissionDeniedError,
                           match=r"ReadFile node 'ReadFile' on /job:worker/replica:0/task:0/device:CPU:0: "
                                 r"reading .* is not allowed"):
            _run(cluster.target, lambda p=path: tw.read_file(str(p)))
    with pytest.raises(errors.PermissionDeniedError, match="WriteFile node .* writing"):
        _run(cluster.target, lambda: tw.write_file(str(base / "planted.txt"), tw.constant(b"x")))
    assert not (base / "planted.txt").exists()
    with pytest.raises(errors.PermissionDeniedError, match="WriteFile"):  # through a link: nothing written
        _run(cluster.target, lambda: tw.write_file(str(allowed / "link"), tw.constant(b"overwritten")))
    assert (base / "secret.txt").read_bytes() == b"the secret\n"

    got = _run(cluster.target, lambda: tw.matching_files(str(allowed / "*")))
    assert sorted(os.path.basename(os.fsdecode(p)) for p in got) == ["data.txt", "sub"]
    with pytest.raises(errors.PermissionDeniedError, match="MatchingFiles"):
        _run(cluster.target, lambda: tw.matching_files(str(base / "*")))
    # the worker keeps serving
    assert _run(cluster.target, lambda: tw.read_file(str(allowed / "data.txt"))) == b"one\ntwo\n"


def test_checkpoints_readers_and_datasets_on_a_worker_obey_the_allow_list(files_cluster):
    cluster, base = files_cluster
    allowed = base / "allowed"
    g = tw.Graph()
    with g.as_default(), tw.device(TASK):
        v = tw.Variable(np.arange(4.0), name="v")
        saver = tw.train.Saver([v])
    (allowed / "ckpt").mkdir(exist_ok=True)
    (base / "elsewhere").mkdir(exist_ok=True)
    with tw.Session(cluster.target, graph=g) as sess:
        sess.run(v.initializer, options=STEP)
        saver.save(sess, str(allowed / "ckpt" / "model"))
        with pytest.raises(errors.PermissionDeniedError, match=r"SaveV2 node .* writing .*model.* is not allowed"):
            saver.save(sess, str(base / "elsewhere" / "model"))
        sess.run(v.assign(np.zeros(4)), options=STEP)
        saver.restore(sess, str(allowed / "ckpt" / "model"))
        np.testing.assert_array_equal(sess.run(v, options=STEP), np.arange(4.0))
    assert not any(n.startswith("model") for n in os.listdir(base / "elsewhere"))

    def lines(path):
        # A scope per file: one-shot iterators are resources the worker keeps by node name.
        with tw.name_scope(path.stem):
            ds = tw.data.TextLineDataset([str(path)])
            return ds.make_one_shot_iterator().get_next()
    assert _run(cluster.target, lambda: lines(allowed / "data.txt")) == b"one"
    with pytest.raises(errors.PermissionDeniedError, match="TextLineDataset .* reading .*secret.txt"):
        _run(cluster.target, lambda: lines(base / "secret.txt"))

    def read_record(path):
        with tw.name_scope(path.stem):
            queue = tw.FIFOQueue(4, [tw.string])
            enq = queue.enqueue([str(path)])
            with tw.control_dependencies([enq]):
                _, value = tw.WholeFileReader().read(queue)
            return value
    assert _run(cluster.target, lambda: read_record(allowed / "data.txt")) == b"one\ntwo\n"
    with pytest.raises(errors.PermissionDeniedError, match="WholeFileReader .* reading .*secret.txt"):
        _run(cluster.target, lambda: read_record(base / "secret.txt"))


def test_by_default_a_worker_allows_the_directory_it_was_started_in(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_bytes(b"mine")
    (tmp_path / "other.txt").write_bytes(b"other")
    monkeypatch.chdir(work)
    server = Server({"worker": ["inproc-files-default:1"]}, "worker", 0, transport="inproc")
    try:
        assert _run(server.target, lambda: tw.read_file("mine.txt")) == b"mine"
        with pytest.raises(errors.PermissionDeniedError, match="ReadFile"):
            _run(server.target, lambda: tw.read_file(str(tmp_path / "other.txt")))
        with pytest.raises(errors.PermissionDeniedError, match="ReadFile"):
            _run(server.target, lambda: tw.read_file("../other.txt"))
    finally:
        server.stop()
    # a local session's ops are the user's own program: no restriction
    with tw.Session(graph=tw.Graph()) as sess, sess.graph.as_default():
        assert sess.run(tw.read_file(str(tmp_path / "other.txt"))) == b"other"
