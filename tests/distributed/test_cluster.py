"""Cluster configuration: ClusterSpec (TF1 API), TOML / TW_CONFIG / dict loading, validation,
per-pair transports, TLS and token sources, start-up transport checks, writing TOML back."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

import tensorweave as tw
from tensorweave.distributed import cluster as cl
from tensorweave.framework import errors

SIMPLE = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


def write(tmp_path, text, name="cluster.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# ----------------------------------------------------------------------------------------
# ClusterSpec

def test_cluster_spec_tf1_api():
    spec = tw.train.ClusterSpec(SIMPLE)
    assert spec.jobs == ["ps", "worker"]
    assert spec.num_tasks("worker") == 2 and spec.num_tasks("ps") == 1
    assert spec.task_indices("worker") == [0, 1]
    assert spec.task_address("worker", 1) == "127.0.0.1:2224"
    assert spec.job_tasks("worker") == ["127.0.0.1:2223", "127.0.0.1:2224"]
    assert spec.as_dict() == SIMPLE
    assert spec.as_cluster_def() == {"job": [
        {"name": "ps", "tasks": {0: "127.0.0.1:2222"}},
        {"name": "worker", "tasks": {0: "127.0.0.1:2223", 1: "127.0.0.1:2224"}}]}
    assert tw.train.ClusterSpec(spec.as_cluster_def()) == spec
    assert tw.train.ClusterSpec(spec) == spec and bool(spec)
    assert spec != tw.train.ClusterSpec({"ps": ["127.0.0.1:2222"]})
    assert "ClusterSpec(" in repr(spec) and "127.0.0.1:2224" in repr(spec)


def test_cluster_spec_sparse_jobs():
    spec = tw.train.ClusterSpec({"worker": {1: "h1:2222", 3: "h3:2222"}, "ps": {"0": "h0:2222"}})
    assert spec.task_indices("worker") == [1, 3]
    assert spec.num_tasks("worker") == 2
    assert spec.job_tasks("worker") == [None, "h1:2222", None, "h3:2222"]
    # a sparse job stays a table; a dense one (even given as a table) becomes a list
    assert spec.as_dict() == {"worker": {1: "h1:2222", 3: "h3:2222"}, "ps": ["h0:2222"]}
    assert spec.all_tasks() == [("worker", 1, "h1:2222"), ("worker", 3, "h3:2222"), ("ps", 0, "h0:2222")]


def test_cluster_spec_lookup_errors_name_what_exists():
    spec = tw.train.ClusterSpec(SIMPLE)
    with pytest.raises(errors.InvalidArgumentError, match=r"no such job in cluster: 'chief' \(jobs: ps, worker\)"):
        spec.num_tasks("chief")
    with pytest.raises(ValueError, match=r"no task with index 5 in job 'worker' \(indices: \[0, 1\]\)"):
        spec.task_address("worker", 5)


@pytest.mark.parametrize("cluster, message", [
    ({"worker": []}, r"\[cluster\] worker: job 'worker' has no tasks"),
    ({}, "the cluster has no jobs"),
    ({"worker": ["localhost"]}, r"worker\[0\]: 'localhost' is not a \"host:port\" address"),
    ({"worker": ["h:99999"]}, r"'h:99999' is not a \"host:port\""),
    ({"worker": ["h:22:33"]}, r"'h:22:33' is not a \"host:port\""),
    ({"worker": [2222]}, r"worker\[0\]: expected a \"host:port\" string, got int 2222"),
    ({"worker": "h:1"}, r"worker: expected a list of \"host:port\" addresses or a table"),
    ({"bad-name": ["h:1"]}, r"job name 'bad-name' is not valid"),
    ({"worker": {"x": "h:1"}}, r"task index 'x' is not a non-negative integer"),
    ({"ps": ["h:1"], "worker": ["h:2", "h:1"]}, r"address 'h:1' is used by two tasks: /job:ps/task:0 and /job:worker/task:1"),
])
def test_bad_clusters_are_rejected_naming_the_key(cluster, message):
    with pytest.raises(errors.InvalidArgumentError, match=message):
        cl.config_from_dict({"cluster": cluster})


def test_addresses_ipv6_and_port_zero():
    spec = tw.train.ClusterSpec({"worker": ["[::1]:2222", "localhost:0", "localhost:0"]})
    assert cl.parse_address("[::1]:2222") == ("[::1]", 2222)
    assert spec.num_tasks("worker") == 3  # port 0 binds a fresh port per task: no collision


# ----------------------------------------------------------------------------------------
# TOML

FULL = """\
    transport = "grpc"
    health_check_interval = 0.5
    max_message_bytes = 1048576

    [cluster]
    ps = ["127.0.0.1:2222"]
    worker = ["127.0.0.1:2223", "127.0.0.1:2224"]

    [transport_pairs]
    "ps-worker" = { control = "grpc", tensors = "ucx" }
    "worker-worker" = "ucx"

    [tls]
    cert = "certs/node.pem"
    key = "certs/node.key"
    root = "certs/ca.pem"
    server_name = "tw.internal"

    [auth]
    token_env = "TW_TEST_TOKEN"

    [timeouts]
    connect = 5
    request = 20.0
    health_check = 0.25
"""


def test_load_full_config(tmp_path):
    path = write(tmp_path, FULL)
    cfg = cl.load_config(path)
    assert cfg.spec == tw.train.ClusterSpec(SIMPLE) and cfg.source == path
    assert cfg.transport == ("grpc", "grpc")
    assert cfg.transport_for("worker", "ps") == ("grpc", "ucx") == cfg.transport_for("ps", "worker")
    assert cfg.transport_for("worker", "worker") == ("ucx", "ucx")
    assert cfg.transport_for("ps", "ps") == ("grpc", "grpc")
    assert cfg.transports_used() == {"grpc": ["ps-ps", "ps-worker control"],
                                     "ucx": ["ps-worker tensors", "worker-worker"]}
    assert cfg.transports_used("ps") == {"grpc": ["ps-ps", "ps-worker control"], "ucx": ["ps-worker tensors"]}
    certs = os.path.join(str(tmp_path), "certs")
    assert cfg.tls == cl.TLSFiles(cert=os.path.join(certs, "node.pem"), key=os.path.join(certs, "node.key"),
                                  root=os.path.join(certs, "ca.pem"), server_name="tw.internal")
    assert cfg.token_env == "TW_TEST_TOKEN" and cfg.token_file is None
    assert cfg.health_check_interval == 0.5 and cfg.max_message_bytes == 1 << 20
    assert cfg.timeouts == cl.Timeouts(connect=5.0, request=20.0, health_check=0.25)
    assert cfg.health_check_timeout == 0.25
    assert cfg.task_of("127.0.0.1:2224") == ("worker", 1)
    with pytest.raises(errors.NotFoundError, match="no task of the cluster has address '127.0.0.1:9'"):
        cfg.task_of("127.0.0.1:9")


def test_minimal_config_defaults(tmp_path):
    cfg = cl.load_config(write(tmp_path, """\
        [cluster]
        worker = ["127.0.0.1:2223"]
    """))
    assert cfg.transport == ("grpc", "grpc") and cfg.transport_pairs == {}
    assert cfg.health_check_interval == 1.0 and cfg.health_check_timeout == 1.0
    assert cfg.tls is None and cfg.token() is None and cfg.task is None


def test_the_issue_example_and_a_split_transport(tmp_path):
    cfg = cl.load_config(write(tmp_path, """\
        transport = { control = "grpc", tensors = "ucx" }
        [cluster]
        ps = ["127.0.0.1:2222"]
        worker = ["127.0.0.1:2223", "127.0.0.1:2224"]
    """))
    assert cfg.transport_for("ps", "worker") == ("grpc", "ucx")
    with pytest.raises(errors.InvalidArgumentError, match="no such job in cluster: 'chief'"):
        cfg.transport_for("chief", "worker")


BAD_TOML = [
    ('[cluster]\nworker = ["h:1"]\n[transport_pairs]\n"ps-worker" = "ucx"\n',
     r"\[transport_pairs\]: key 'ps-worker' names job 'ps', which is not in \[cluster\] \(jobs: worker\)"),
    ('[cluster]\nps = ["h:1"]\nworker = ["h:2"]\n[transport_pairs]\npsworker = "ucx"\n',
     r"key 'psworker' is not a job pair \"job_a-job_b\""),
    ('[cluster]\nps = ["h:1"]\nworker = ["h:2"]\n[transport_pairs]\n"ps-worker" = "ucx"\n"worker-ps" = "grpc"\n',
     r"the pair ps-worker is given twice"),
    ('[cluster]\nworker = ["h:1"]\ntransport = "grpc"\n',
     r"\[cluster\] transport: .*'transport' is a top-level setting: in TOML it must come before the first \[table\]"),
    ('transprot = "grpc"\n[cluster]\nworker = ["h:1"]\n', r"unknown key 'transprot' \(did you mean 'transport'\?\)"),
    ('transport = 3\n[cluster]\nworker = ["h:1"]\n', r"transport: expected a transport name or"),
    ('transport = { control = "grpc" }\n[cluster]\nworker = ["h:1"]\n', r"needs both 'control' and 'tensors' \(missing tensors\)"),
    ('transport = { control = "grpc", tensor = "ucx" }\n[cluster]\nworker = ["h:1"]\n',
     r"unknown key 'tensor' \(did you mean 'tensors'\?\)"),
    ('health_check_interval = "1s"\n[cluster]\nworker = ["h:1"]\n', r"health_check_interval: expected a  ?number, got str"),
    ('health_check_interval = -1\n[cluster]\nworker = ["h:1"]\n', r"health_check_interval: expected a positive number"),
    ('health_check_interval = true\n[cluster]\nworker = ["h:1"]\n', r"health_check_interval: expected a  ?number, got bool"),
    ('max_message_bytes = 1.5\n[cluster]\nworker = ["h:1"]\n', r"max_message_bytes: expected a whole number"),
    ('[cluster]\nworker = ["h:1"]\n[tls]\ncert = "a.pem"\n', r"\[tls\]: 'cert' and 'key' go together"),
    ('[cluster]\nworker = ["h:1"]\n[tls]\ncertificate = "a.pem"\n', r"\[tls\]: unknown key 'certificate'"),
    ('[cluster]\nworker = ["h:1"]\n[auth]\ntoken = "s3cret"\n', r"\[auth\]: unknown key 'token'"),
    ('[cluster]\nworker = ["h:1"]\n[auth]\ntoken_env = "A"\ntoken_file = "t"\n', r"give exactly one token source"),
    ('[cluster]\nworker = ["h:1"]\n[auth]\ntoken_env = "not a var"\n', r"token_env: expected the name of an environment variable"),
    ('[cluster]\nworker = ["h:1"]\n[timeouts]\nconect = 3\n', r"\[timeouts\]: unknown key 'conect' \(did you mean 'connect'\?\)"),
    ('cluster = ["h:1"]\n', r"\[cluster\]: expected a table of job name"),
    ('transport = "grpc"\n', r"missing the \[cluster\] table"),
    ('tls = "x"\n[cluster]\nworker = ["h:1"]\n', r"\[tls\]: expected a table, got str"),
]


@pytest.mark.parametrize("text, message", BAD_TOML, ids=[f"bad_toml{i}" for i in range(len(BAD_TOML))])
def test_bad_toml_names_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(errors.InvalidArgumentError, match=message) as exc:
        cl.load_config(path)
    assert str(exc.value).startswith(path + ": ")


def test_a_secret_written_as_a_key_is_not_echoed(tmp_path):
    path = write(tmp_path, '[cluster]\nworker = ["h:1"]\n[auth]\ntoken = "s3cret-value"\n')
    with pytest.raises(errors.InvalidArgumentError) as exc:
        cl.load_config(path)
    assert "s3cret-value" not in str(exc.value)


def test_toml_syntax_error_and_missing_file(tmp_path):
    path = write(tmp_path, "[cluster]\nworker = [\"h:1\"]\nps = \"h:2\" \"h:3\"\n")
    with pytest.raises(errors.InvalidArgumentError, match=r"cluster.toml: not valid TOML: .*line 3"):
        cl.load_config(path)
    with pytest.raises(errors.NotFoundError, match=r"cluster config '.*nope.toml' does not exist"):
        cl.load_config(tmp_path / "nope.toml")


# ----------------------------------------------------------------------------------------
# TW_CONFIG and dicts

def test_config_from_env_with_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    value = json.dumps({"cluster": SIMPLE, "task": {"type": "worker", "index": 1},
                        "transport": {"control": "grpc", "tensors": "ucx"},
                        "auth": {"token_file": "token.txt"}})
    cfg = cl.config_from_env(environ={"TW_CONFIG": value})
    assert cfg.task == ("worker", 1) and cfg.source == "$TW_CONFIG"
    assert cfg.transport == ("grpc", "ucx")
    assert cfg.token_file == os.path.join(str(tmp_path), "token.txt")  # relative to the current directory
    monkeypatch.setenv("MY_CFG", json.dumps({"cluster": {"worker": ["h:1"]}}))
    assert cl.config_from_env("MY_CFG").spec.jobs == ["worker"]


@pytest.mark.parametrize("value, exc, message", [
    (None, errors.NotFoundError, r"environment variable TW_CONFIG is not set"),
    ('{"cluster": ', errors.InvalidArgumentError, r"\$TW_CONFIG: not valid JSON: .* line 1 column"),
    ('[1]', errors.InvalidArgumentError, r"\$TW_CONFIG: expected a table at the top level, got list"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "ps", "index": 0}}', errors.InvalidArgumentError,
     r"\$TW_CONFIG: task.type: job 'ps' is not in the cluster"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}', errors.InvalidArgumentError,
     r"task.index: job 'worker' has no task 3"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "0"}}', errors.InvalidArgumentError,
     r"task.index: expected a task index, got str"),
])
def test_config_from_env_errors(value, exc, message):
    environ = {} if value is None else {"TW_CONFIG": value}
    with pytest.raises(exc, match=message):
        cl.config_from_env(environ=environ)


def test_with_task_and_as_config(tmp_path):
    cfg = cl.config_from_dict({"cluster": SIMPLE})
    assert cfg.with_task("ps", 0).task == ("ps", 0) and cfg.task is None
    with pytest.raises(errors.InvalidArgumentError, match="no task with index 4 in job 'ps'"):
        cfg.with_task("ps", 4)
    assert cl.as_config(cfg) is cfg
    assert cl.as_config(SIMPLE) == cfg == cl.as_config({"cluster": SIMPLE})
    assert cl.as_config(tw.train.ClusterSpec(SIMPLE)) == cfg
    path = write(tmp_path, '[cluster]\nps = ["127.0.0.1:2222"]\nworker = ["127.0.0.1:2223", "127.0.0.1:2224"]\n')
    assert cl.as_config(path) == cfg


# ----------------------------------------------------------------------------------------
# Writing it back

def test_to_toml_round_trips(tmp_path):
    cfg = cl.load_config(write(tmp_path, FULL)).with_task("worker", 0)
    text = cfg.to_toml()
    again = cl.load_config(write(tmp_path / "..", text, name="again.toml"))
    assert again == cfg
    sparse = cl.config_from_dict({"cluster": {"worker": {1: "h:1", 5: "h:5"}}, "transport": "inproc",
                                  "auth": {"token_env": "T"}})
    assert cl.load_config(write(tmp_path, sparse.to_toml(), name="sparse.toml")) == sparse
    assert cl.config_from_dict(json.loads(json.dumps(sparse.to_dict()))) == sparse


# ----------------------------------------------------------------------------------------
# Secrets: read when a server or channel starts, never shown

def test_security_from_files_and_token_env(tmp_path, monkeypatch):
    (tmp_path / "certs").mkdir()
    for name in ("node.pem", "node.key", "ca.pem"):
        (tmp_path / "certs" / name).write_bytes(f"PEM {name}".encode())
    cfg = cl.load_config(write(tmp_path, FULL))
    monkeypatch.setenv("TW_TEST_TOKEN", "s3cret-token")
    server = cfg.security_for(role="server")
    assert (server.tls_cert, server.tls_key, server.tls_root) == (b"PEM node.pem", b"PEM node.key", None)
    assert server.token == "s3cret-token" and server.max_message_bytes == 1 << 20
    client = cfg.security_for(role="client")
    assert (client.tls_cert, client.tls_key, client.tls_root) == (None, None, b"PEM ca.pem")
    assert client.tls_server_name == "tw.internal" and client.tls
    both = cfg.security_for("ps", "worker")
    assert both.tls_cert and both.tls_key and both.tls_root == b"PEM ca.pem"
    # the token never shows in the config or the Security's repr (logs)
    assert "s3cret-token" not in repr(cfg) and "s3cret-token" not in repr(both)
    assert "PEM node.key" not in repr(both)
    with pytest.raises(errors.InvalidArgumentError, match="no such job in cluster: 'chief'"):
        cfg.security_for("chief", "worker")


def test_self_signed_cluster_trusts_its_certificate(tmp_path):
    (tmp_path / "self.pem").write_bytes(b"CERT")
    (tmp_path / "self.key").write_bytes(b"KEY")
    cfg = cl.config_from_dict({"cluster": SIMPLE, "tls": {"cert": "self.pem", "key": "self.key"}},
                              base_dir=str(tmp_path))
    assert cfg.security_for(role="client").tls_root == b"CERT"


def test_token_file_and_missing_secrets(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("file-token\n")
    cfg = cl.config_from_dict({"cluster": SIMPLE, "auth": {"token_file": "token"}}, base_dir=str(tmp_path),
                              source="c.toml")
    assert cfg.security_for().token == "file-token"
    (tmp_path / "token").write_text("\n")
    with pytest.raises(errors.InvalidArgumentError, match=r"c.toml: \[auth\] token_file '.*token' is empty"):
        cfg.security_for()
    os.remove(tmp_path / "token")
    with pytest.raises(errors.NotFoundError, match=r"c.toml: cannot read \[auth\] token_file file '.*token'"):
        cfg.security_for()
    monkeypatch.delenv("TW_UNSET_TOKEN", raising=False)
    cfg = cl.config_from_dict({"cluster": SIMPLE, "auth": {"token_env": "TW_UNSET_TOKEN"}}, source="c.toml")
    with pytest.raises(errors.NotFoundError, match=r"c.toml: \[auth\] token_env names the environment variable "
                                                   r"'TW_UNSET_TOKEN', which is not set"):
        cfg.security_for()
    cfg = cl.config_from_dict({"cluster": SIMPLE, "tls": {"root": "missing-ca.pem"}}, base_dir=str(tmp_path),
                              source="c.toml")
    with pytest.raises(errors.NotFoundError, match=r"c.toml: cannot read \[tls\] root file '.*missing-ca.pem'"):
        cfg.security_for(role="client")


# ----------------------------------------------------------------------------------------
# Start-up check: a transport named but not installed

def test_check_transports_names_the_transport_and_pair():
    cfg = cl.config_from_dict({"cluster": SIMPLE, "transport": "inproc",
                               "transport_pairs": {"ps-worker": {"control": "inproc", "tensors": "no_such_net"}}},
                              source="cluster.toml")
    with pytest.raises(errors.NotFoundError) as exc:
        cl.check_transports(cfg)
    msg = str(exc.value)
    assert msg.startswith("cluster.toml: transport 'no_such_net' (configured for job pair ps-worker tensors) "
                          "is not installed (installed: ")
    assert "inproc" in msg and "pip install tensorweave-no_such_net" in msg
    # a ps-only view still needs it (ps talks to workers); a config without it is fine
    with pytest.raises(errors.NotFoundError, match="no_such_net"):
        cl.check_transports(cfg, job="ps")
    ok = cl.config_from_dict({"cluster": SIMPLE, "transport": "inproc"})
    found = cl.check_transports(ok)
    assert list(found) == ["inproc"] and found["inproc"].name == "inproc"
