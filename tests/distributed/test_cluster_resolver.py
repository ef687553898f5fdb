"""``tw.distribute.cluster_resolver``: TF_CONFIG/TW_CONFIG, Slurm and Kubernetes resolvers from
environments set with monkeypatch, their errors outside their environment or with malformed
values, the ClusterConfig they make, and ``tensorweave worker --resolver ...`` serving the task
a resolver names (real worker processes over grpc, reaped by the tests).

Slurm's ``scontrol`` is kept off PATH here (an empty directory), so the resolver's own host-list
parser is what is tested, except where a fake ``scontrol`` tests how its answer or failure is
used; the real one runs in test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import plugins
from tensorweave.distribute import cluster_resolver as cr
from tensorweave.distributed import cluster as cl
from tensorweave.distributed import launcher
from tensorweave.distributed import resolvers as cr_impl
from tensorweave.framework import errors
from tensorweave.tools import cli

ENV_PREFIXES = ("SLURM", "TF_CONFIG", "TW_CONFIG", "TW_K8S", "POD_NAMESPACE", "CUDA_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No cluster manager's variables from outside, and no scontrol or nvidia-smi on PATH."""
    for k in list(os.environ):
        if k.startswith(ENV_PREFIXES):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOSTNAME", "")  # a pod name is never taken from the test machine's name
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return monkeypatch


def _slurm(monkeypatch, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))


def test_the_tf_names():
    assert tw.distribute.cluster_resolver.SlurmClusterResolver is cr.SlurmClusterResolver
    assert issubclass(cr.KubernetesClusterResolver, cr.ClusterResolver)
    assert cr.format_master_url("h:1", "grpc") == "grpc://h:1" and cr.format_master_url("h:1") == "h:1"
    assert cr.format_master_url("", "grpc") == ""


# ----------------------------------------------------------------------------------------
# SimpleClusterResolver

def test_simple_resolver():
    r = cr.SimpleClusterResolver(tw.train.ClusterSpec({"ps": ["a:1"], "worker": ["b:2", "c:3"]}),
                                 master="b:2", task_type="worker", task_id=1, rpc_layer="grpc",
                                 num_accelerators={"GPU": 2})
    assert r.cluster_spec().task_address("worker", 1) == "c:3"
    assert r.master() == "grpc://b:2" and r.master("ps", 0) == "grpc://a:1" and r.master(rpc_layer="ucx") == "ucx://b:2"
    assert r.num_accelerators() == {"GPU": 2} and r.environment == ""
    config = r.cluster_config()
    assert config.task == ("worker", 1) and config.transport == ("grpc", "grpc")
    assert config.spec == r.cluster_spec()
    assert cr.config_from_resolver(r, "ucx").transport == ("ucx", "ucx")
    with pytest.raises(errors.InvalidArgumentError, match="no such job"):
        r.master("chief", 0)


# ----------------------------------------------------------------------------------------
# TF_CONFIG / TW_CONFIG

TF = {"cluster": {"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]},
      "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc", "environment": "cloud"}


def test_tf_config(clean_env):
    clean_env.setenv("TF_CONFIG", json.dumps(TF))
    r = cr.TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == TF["cluster"]
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == ("worker", 1, "grpc", "cloud")
    assert r.master() == "grpc://10.0.0.3:2222" and r.master("ps", 0, rpc_layer="ucx") == "ucx://10.0.0.1:2222"
    assert r.num_accelerators() == {}
    config = r.cluster_config()
    assert config.task == ("worker", 1) and config.control_transport == "grpc" and config.source == "$TF_CONFIG"
    # Arguments win over the variable; the variable is read again on every call.
    r2 = cr.TFConfigClusterResolver(task_type="ps", task_id=0, rpc_layer="ucx")
    assert r2.master() == "ucx://10.0.0.1:2222" and r2.cluster_config().task == ("ps", 0)
    clean_env.setenv("TF_CONFIG", json.dumps({**TF, "task": {"type": "ps", "index": 0}}))
    assert (r.task_type, r.task_id) == ("ps", 0)
    # No task: a cluster without this process's place in it.
    clean_env.setenv("TF_CONFIG", json.dumps({"cluster": TF["cluster"]}))
    assert (r.task_type, r.task_id, r.master()) == (None, None, "")
    assert r.cluster_config().task is None


def test_tw_config_wins_and_keeps_its_settings(clean_env):
    clean_env.setenv("TF_CONFIG", json.dumps(TF))
    tw_config = {"cluster": {"worker": ["127.0.0.1:3000", "127.0.0.1:3001"]}, "task": {"type": "worker", "index": 0},
                 "transport": {"control": "grpc", "tensors": "ucx"}, "auth": {"token_env": "TW_TOKEN"},
                 "timeouts": {"connect": 5.0}}
    clean_env.setenv("TW_CONFIG", json.dumps(tw_config))
    r = cr.TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == tw_config["cluster"]
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 0, "grpc")
    config = r.cluster_config()
    assert config.transport == ("grpc", "ucx") and config.token_env == "TW_TOKEN" and config.timeouts.connect == 5.0
    assert config.task == ("worker", 0) and config.source == "$TW_CONFIG"
    assert cr.TFConfigClusterResolver(task_id=1).cluster_config().task == ("worker", 1)


def test_tf_config_errors(clean_env):
    with pytest.raises(errors.NotFoundError, match="neither TW_CONFIG nor TF_CONFIG is set"):
        cr.TFConfigClusterResolver()
    clean_env.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "secret": "hunter2"')
    with pytest.raises(errors.InvalidArgumentError, match=r"\$TF_CONFIG: not valid JSON") as e:
        cr.TFConfigClusterResolver()
    assert "hunter2" not in str(e.value)  # configuration text is never echoed
    for bad, match in [({"task": {"type": "worker"}}, "has no \"cluster\""),
                       ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}, "task.index"),
                       ({"cluster": {"worker": ["a:1"]}, "task": "worker"}, "\"task\" must be an object"),
                       ({"cluster": {"worker": ["a:1"]}, "rpc_layer": 3}, "rpc_layer must be a string")]:
        clean_env.setenv("TF_CONFIG", json.dumps(bad))
        with pytest.raises(errors.InvalidArgumentError, match=match):
            cr.TFConfigClusterResolver()
    clean_env.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["not an address"]}}))
    with pytest.raises(errors.InvalidArgumentError, match=r"\$TF_CONFIG: .*not a \"host:port\" address"):
        cr.TFConfigClusterResolver().cluster_spec()
    clean_env.setenv("TF_CONFIG", json.dumps({**TF, "task": {"type": "chief", "index": 0}}))
    with pytest.raises(errors.InvalidArgumentError, match="job 'chief' is not in the cluster"):
        cr.TFConfigClusterResolver().cluster_config()


# ----------------------------------------------------------------------------------------
# Slurm: the host-list and tasks-per-node formats

@pytest.mark.parametrize("hostlist,hosts", [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
    ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("node-a.example.org,node-b", ["node-a.example.org", "node-b"]),
    ("n[3,1]", ["n3", "n1"]),  # order kept
])
def test_expand_hostlist(hostlist, hosts):
    assert cr.expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist,match", [
    ("", "empty host list"), ("n[1-3", "'\\[' without '\\]'"), ("n1-3]", "'\\]' without '\\['"),
    ("n[[1]]", "nested"), ("n[3-1]", "runs backwards"), ("n[a-b]", "not a number"), ("n1,,n2", "empty host name"),
    ("n[1-]", "not a number"), ("n 1", "not part of a host name"),
])
def test_expand_hostlist_errors(hostlist, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        cr.expand_hostlist(hostlist)


def test_expand_tasks_per_node():
    assert cr.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert cr.expand_tasks_per_node("4") == [4]
    assert cr.expand_tasks_per_node("1,3(x2)") == [1, 3, 3]
    for bad in ("", "2(x)", "x2", "2(x3", "0", "2(x0)", "-1", "2,,1"):
        with pytest.raises(errors.InvalidArgumentError):
            cr.expand_tasks_per_node(bad)


# ----------------------------------------------------------------------------------------
# Slurm: the resolver

def test_slurm_resolver_jobs_take_the_ranks_node_by_node(clean_env):
    _slurm(clean_env, SLURM_PROCID=3, SLURM_STEP_NUM_TASKS=4, SLURM_STEP_NODELIST="n[1-2]",
           SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURMD_NODENAME="n2", SLURM_LOCALID=1)
    r = cr.SlurmClusterResolver(jobs={"worker": 3, "ps": 1})  # jobs sorted by name, as TF does
    assert r.cluster_spec().as_dict() == {"ps": ["n1:8888"], "worker": ["n1:8889", "n2:8888", "n2:8889"]}
    assert (r.task_type, r.task_id) == ("worker", 2) and r.get_task_info() == ("worker", 2)
    assert r.master() == "grpc://n2:8889" and r.master("ps", 0) == "grpc://n1:8888"
    assert r.rpc_layer == "grpc" and r.num_accelerators() == {} and "CUDA_VISIBLE_DEVICES" not in os.environ
    config = r.cluster_config()
    assert config.task == ("worker", 2) and config.task_address("worker", 2) == "n2:8889"
    assert config.control_transport == "grpc"
    # The rank decides the task; every rank sees the same cluster.
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURMD_NODENAME", "n1")
    clean_env.setenv("SLURM_LOCALID", "0")
    r0 = cr.SlurmClusterResolver(jobs={"ps": 1, "worker": 3}, port_base=1337, rpc_layer="ucx")
    assert (r0.task_type, r0.task_id) == ("ps", 0) and r0.master() == "ucx://n1:1337"
    assert r0.cluster_spec().task_address("worker", 2) == "n2:1338"
    assert r0.cluster_config().transport == ("ucx", "ucx")


def test_slurm_resolver_defaults_and_fallback_variables(clean_env):
    # The job's variables when the step's are missing (a batch script), every task a worker.
    _slurm(clean_env, SLURM_PROCID=2, SLURM_NTASKS=4, SLURM_JOB_NODELIST="a,b", SLURM_TASKS_PER_NODE="3,1")
    r = cr.SlurmClusterResolver()
    assert r.cluster_spec().as_dict() == {"worker": ["a:8888", "a:8889", "a:8890", "b:8888"]}
    assert (r.task_type, r.task_id) == ("worker", 2)
    # tasks_per_node given: an int for every node, or a dict host -> tasks (no node list needed).
    r = cr.SlurmClusterResolver(tasks_per_node=2)
    assert r.cluster_spec().as_dict() == {"worker": ["a:8888", "a:8889", "b:8888", "b:8889"]}
    clean_env.delenv("SLURM_JOB_NODELIST")
    clean_env.delenv("SLURM_TASKS_PER_NODE")
    r = cr.SlurmClusterResolver(jobs={"ps": 1, "worker": 3}, tasks_per_node={"x": 1, "y": 3})
    assert r.cluster_spec().as_dict() == {"ps": ["x:8888"], "worker": ["y:8888", "y:8889", "y:8890"]}
    assert (r.task_type, r.task_id) == ("worker", 1)


def test_slurm_resolver_outside_slurm_names_the_variables(clean_env):
    with pytest.raises(errors.NotFoundError) as e:
        cr.SlurmClusterResolver()
    msg = str(e.value)
    assert "not inside a Slurm job step" in msg and "srun" in msg
    for var in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS or SLURM_NTASKS", "SLURM_STEP_NODELIST or SLURM_JOB_NODELIST",
                "SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE"):
        assert var in msg
    _slurm(clean_env, SLURM_STEP_NUM_TASKS=2, SLURM_STEP_NODELIST="n1", SLURM_STEP_TASKS_PER_NODE="2")
    with pytest.raises(errors.NotFoundError, match=r"not set: SLURM_PROCID$"):
        cr.SlurmClusterResolver()


@pytest.mark.parametrize("env,kwargs,match", [
    ({"SLURM_STEP_NODELIST": "n[1-"}, {}, r"SLURM_STEP_NODELIST: '\[' without '\]' in 'n\[1-'"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2"}, {}, r"SLURM_STEP_TASKS_PER_NODE: '2\(x2' in '2\(x2' is not a task count"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)"}, {}, "gives task counts for 3 nodes but SLURM_STEP_NODELIST='n\\[1-2\\]' "
                                                 "names 2"),
    ({}, {"jobs": {"ps": 1, "worker": 4}}, r"jobs ps=1,worker=4 ask for 5 tasks, more than the 4 tasks of this job "
                                           r"step \(start as many tasks as the jobs need: srun -n 5"),
    ({}, {"jobs": {"worker": 3}}, "ask for 3 tasks, fewer than the 4 tasks"),
    ({}, {"jobs": {"ps-0": 1, "worker": 3}}, "job name 'ps-0' is not valid"),
    ({}, {"jobs": {"ps": 0, "worker": 4}}, "needs a positive number of tasks"),
    ({"SLURM_STEP_NUM_TASKS": "5"}, {}, r"SLURM_STEP_NUM_TASKS=5 but the tasks per node add up to 4 \(n1: 2, n2: 2\)"),
    ({"SLURM_PROCID": "4"}, {}, "SLURM_PROCID=4 is not a task of this step"),
    ({"SLURM_PROCID": "one"}, {}, "SLURM_PROCID='one' is not a whole number"),
    ({"SLURM_LOCALID": "0"}, {}, "rank 1 runs as task 0 on n1 .* puts it as task 1 on n1: start the step with "
                                 "--distribution=block"),
    ({}, {"port_base": 70000}, "port_base must be a port"),
    ({}, {"gpus_per_node": 1, "gpus_per_task": 1}, "2 tasks on a node x 1 GPUs per task is more than the 1 GPUs"),
])
def test_slurm_resolver_malformed_values(clean_env, env, kwargs, match):
    base = {"SLURM_PROCID": 1, "SLURM_STEP_NUM_TASKS": 4, "SLURM_STEP_NODELIST": "n[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURMD_NODENAME": "n1", "SLURM_LOCALID": 1}
    _slurm(clean_env, **{**base, **env})
    with pytest.raises(errors.InvalidArgumentError, match=match):
        cr.SlurmClusterResolver(**kwargs)


def test_slurm_resolver_assigns_gpus(clean_env):
    _slurm(clean_env, SLURM_PROCID=3, SLURM_STEP_NUM_TASKS=4, SLURM_STEP_NODELIST="n[1-2]",
           SLURM_STEP_TASKS_PER_NODE="2(x2)", CUDA_VISIBLE_DEVICES="4,5,6,7")
    r = cr.SlurmClusterResolver()
    assert r.num_accelerators() == {"GPU": 2}
    r.cluster_spec()  # sets this task's share: the second pair of the node's GPUs
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    r = cr.SlurmClusterResolver(gpus_per_task=1)
    r.cluster_spec()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5" and r.num_accelerators() == {"GPU": 1}
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    cr.SlurmClusterResolver(auto_set_gpu=False).cluster_spec()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    clean_env.delenv("CUDA_VISIBLE_DEVICES")  # and no nvidia-smi on PATH: a CPU cluster
    r = cr.SlurmClusterResolver()
    r.cluster_spec()
    assert r.num_accelerators() == {} and "CUDA_VISIBLE_DEVICES" not in os.environ
    r = cr.SlurmClusterResolver(gpus_per_node=4)
    r.cluster_spec()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def _fake_scontrol(directory: Path, script: str) -> None:
    exe = directory / "scontrol"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)


def test_slurm_resolver_expands_the_node_list_with_scontrol(clean_env, tmp_path):
    """Slurm's own expansion wins where scontrol works (here a stand-in answering for a node
    list our parser could not read); where it fails, our parser reads the list, and a list
    neither can read is an error naming both reasons."""
    bin_dir = tmp_path / "empty-bin"
    _fake_scontrol(bin_dir, '[ "$1 $2" = "show hostnames" ] || exit 2\n'
                            'case "$3" in\n'
                            '  "weird{1..2}") printf "alpha\\nbeta\\n" ;;\n'
                            '  *) echo "scontrol: error: Invalid hostlist: $3" >&2; exit 1 ;;\n'
                            'esac\n')
    _slurm(clean_env, SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2, SLURM_STEP_NODELIST="weird{1..2}",
           SLURM_STEP_TASKS_PER_NODE="1(x2)")
    if not any(os.path.exists(p) for p in cr_impl.SLURM_CONF_FILES):
        # Without a Slurm configuration scontrol is not asked (it could not answer).
        with pytest.raises(errors.InvalidArgumentError, match=r"\(no Slurm configuration for scontrol"):
            cr.SlurmClusterResolver()
    clean_env.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert cr.SlurmClusterResolver().cluster_spec().as_dict() == {"worker": ["alpha:8888", "beta:8888"]}
    clean_env.setenv("SLURM_STEP_NODELIST", "n[7-8]")  # scontrol fails; our parser reads it
    assert cr.SlurmClusterResolver().cluster_spec().as_dict() == {"worker": ["n7:8888", "n8:8888"]}
    clean_env.setenv("SLURM_STEP_NODELIST", "n[7-")
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"'\[' without '\]' .*\(`scontrol show hostnames` failed: scontrol: error: Invalid hostlist"):
        cr.SlurmClusterResolver()


# ----------------------------------------------------------------------------------------
# Kubernetes

def test_kubernetes_resolver_from_the_pod_environment(clean_env):
    clean_env.setenv("TW_K8S_POD_NAME", "digits-worker-1")
    clean_env.setenv("TW_K8S_NAMESPACE", "ml")
    r = cr.KubernetesClusterResolver(jobs={"ps": 1, "worker": 2})
    assert (r.task_type, r.task_id, r.cluster_name, r.namespace) == ("worker", 1, "digits", "ml")
    assert r.cluster_spec().as_dict() == {
        "ps": ["digits-ps-0.digits-ps.ml.svc.cluster.local:2222"],
        "worker": ["digits-worker-0.digits-worker.ml.svc.cluster.local:2222",
                   "digits-worker-1.digits-worker.ml.svc.cluster.local:2222"]}
    assert r.master() == "grpc://digits-worker-1.digits-worker.ml.svc.cluster.local:2222"
    config = r.cluster_config()
    assert config.task == ("worker", 1) and "pod digits-worker-1 in namespace ml" in config.source
    # HOSTNAME (a StatefulSet pod's host name is its name), TW_K8S_JOBS, POD_NAMESPACE,
    # the cluster domain, one Service for every job, a StatefulSet named after its job.
    clean_env.delenv("TW_K8S_POD_NAME")
    clean_env.delenv("TW_K8S_NAMESPACE")
    clean_env.setenv("HOSTNAME", "ps-0")
    clean_env.setenv("TW_K8S_JOBS", "ps=1,worker=2")
    clean_env.setenv("POD_NAMESPACE", "team-a")
    clean_env.setenv("TW_K8S_CLUSTER_DOMAIN", "corp.internal")
    r = cr.KubernetesClusterResolver(port=7000, service="tw", rpc_layer="ucx")
    assert (r.task_type, r.task_id, r.cluster_name) == ("ps", 0, "")
    assert r.cluster_spec().as_dict()["worker"][1] == "worker-1.tw.team-a.svc.corp.internal:7000"
    assert r.master() == "ucx://ps-0.tw.team-a.svc.corp.internal:7000"


def test_kubernetes_resolver_reads_the_namespace_file(clean_env, tmp_path):
    ns = tmp_path / "namespace"
    ns.write_text("prod\n")
    r = cr.KubernetesClusterResolver(jobs="worker=3", pod_name="tw-worker-2", namespace_file=str(ns))
    assert r.namespace == "prod" and (r.task_type, r.task_id) == ("worker", 2)


def test_kubernetes_resolver_outside_a_pod_names_what_it_looked_for(clean_env, tmp_path):
    with pytest.raises(errors.NotFoundError) as e:
        cr.KubernetesClusterResolver(namespace_file=str(tmp_path / "none"))
    msg = str(e.value)
    for name in ("TW_K8S_JOBS", "TW_K8S_POD_NAME", "HOSTNAME", "TW_K8S_NAMESPACE", "POD_NAMESPACE", "none"):
        assert name in msg, msg


@pytest.mark.parametrize("pod,jobs,match", [
    ("digits-worker", {"worker": 2}, "is not <statefulset>-<ordinal>"),
    ("Digits-worker-0", {"worker": 2}, "is not <statefulset>-<ordinal>"),
    ("digits-eval-0", {"ps": 1, "worker": 2}, "StatefulSet 'digits-eval', which is not <name>-<job> for a job of "
                                              "ps=1,worker=2"),
    ("digits-worker-2", {"worker": 2}, "is task 2 of job 'worker', which has 2 replicas"),
    ("digits-worker-0", {"Worker": 2}, "cannot be part of a pod name"),
    ("digits-worker-0", "worker=two", "not a list of job=count"),
])
def test_kubernetes_resolver_malformed_values(clean_env, pod, jobs, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        cr.KubernetesClusterResolver(jobs=jobs, pod_name=pod, namespace="ml")


# ----------------------------------------------------------------------------------------
# tensorweave worker --resolver ...

def test_worker_resolver_arguments(clean_env, capsys):
    assert cli.main(["worker", "--resolver", "slurm"]) == 2
    assert "SLURM_PROCID" in capsys.readouterr().err
    assert cli.main(["worker", "--resolver", "kubernetes", "--jobs", "worker=1"]) == 2
    assert "TW_K8S_POD_NAME or HOSTNAME" in capsys.readouterr().err
    assert cli.main(["worker", "--resolver", "tf_config"]) == 2
    assert "neither TW_CONFIG nor TF_CONFIG" in capsys.readouterr().err
    assert cli.main(["worker", "--resolver", "slurm", "--config", "x.toml"]) == 2
    assert "leave out --config, --job and --task" in capsys.readouterr().err
    assert cli.main(["worker", "--resolver", "tf_config", "--jobs", "ps=1"]) == 2
    assert "leave out --jobs" in capsys.readouterr().err
    assert cli.main(["worker", "--jobs", "ps=1,worker=1"]) == 2
    assert "go with --resolver" in capsys.readouterr().err
    clean_env.setenv("TF_CONFIG", json.dumps({"cluster": TF["cluster"]}))
    assert cli.main(["worker", "--resolver", "tf_config"]) == 2
    assert "not this process's task" in capsys.readouterr().err


def test_worker_resolver_config_in_a_pod(clean_env):
    """What `tensorweave worker --resolver kubernetes ...` (the manifest's command) serves,
    without the server (the pods' DNS names exist only inside the cluster)."""
    clean_env.setenv("TW_K8S_POD_NAME", "digits-ps-0")
    clean_env.setenv("TW_K8S_NAMESPACE", "ml")
    clean_env.setenv("TW_TOKEN", "s3cret")
    args = cli._parser().parse_args(["worker", "--resolver", "kubernetes", "--jobs", "ps=1,worker=2", "--port-base",
                                     "2300", "--transport", "grpc", "--tensors-transport", "ucx",
                                     "--token-env", "TW_TOKEN"])
    config = cli._resolver_config(args)
    assert config.task == ("ps", 0) and config.transport == ("grpc", "ucx") and config.token_env == "TW_TOKEN"
    assert config.task_address("worker", 1) == "digits-worker-1.digits-worker.ml.svc.cluster.local:2300"


def _grpc():
    if "grpc" not in {n for n, _ in plugins.registry().transports.items()}:
        pytest.skip("transport grpc is not installed")


def _free_run(n: int) -> int:
    for _ in range(50):
        base = launcher.pick_ports(1)[0]
        try:
            launcher.pick_ports(n, "127.0.0.1", base)
        except errors.OpError:
            continue
        return base
    pytest.fail(f"no {n} consecutive free ports")


class Workers:
    """`tensorweave worker` processes, each with its own environment; always reaped."""

    def __init__(self, directory: Path):
        self.dir, self.tasks = directory, []

    def start(self, argv: list[str], env: dict, job: str, task: int, address: str) -> launcher.TaskProcess:
        """Start one; ``job``, ``task``, ``address``: what its ready line must say."""
        log = self.dir / f"{job}-{task}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        # The venv's bin only: no scontrol (nor nvidia-smi) to ask.
        full_env.update(env, PATH=os.path.dirname(sys.executable), PYTHONUNBUFFERED="1",
                        **{launcher.PARENT_ENV: str(os.getpid())})
        with open(log, "ab") as f:
            p = subprocess.Popen([sys.executable, "-m", "tensorweave", "worker", *argv], stdout=f,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                                 start_new_session=True)
        t = launcher.TaskProcess(job, task, address, p, str(log))
        self.tasks.append(t)
        return t

    def stop(self) -> list[int]:
        for t in self.tasks:
            if t.popen.poll() is None:
                t.popen.send_signal(signal.SIGTERM)
        codes = []
        for t in self.tasks:
            try:
                codes.append(t.popen.wait(timeout=30))
            except subprocess.TimeoutExpired:
                t.popen.kill()
                codes.append(t.popen.wait(timeout=10))
        return codes


@pytest.fixture
def workers(tmp_path):
    w = Workers(tmp_path)
    try:
        yield w
    finally:
        w.stop()


def test_worker_serves_the_task_slurm_names(workers):
    """Two ranks of a (simulated) srun step, jobs ps=1,worker=1: each `tensorweave worker
    --resolver slurm` serves its own task, and a client reaches both through the config any
    rank's resolver makes."""
    _grpc()
    port = _free_run(2)
    step = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_STEP_TASKS_PER_NODE": "2"}
    argv = ["--resolver", "slurm", "--jobs", "worker=1,ps=1", "--port-base", str(port)]
    ps = workers.start(argv, {**step, "SLURM_PROCID": "0"}, "ps", 0, f"127.0.0.1:{port}")
    wk = workers.start(argv, {**step, "SLURM_PROCID": "1"}, "worker", 0, f"127.0.0.1:{port + 1}")
    launcher.wait_ready([ps, wk], timeout=60)
    config = cr.SlurmClusterResolver(jobs={"ps": 1, "worker": 1}, port_base=port, environ={
        **step, "SLURM_PROCID": "1", "PATH": ""}).cluster_config()
    with tw.Graph().as_default():
        with tw.device("/job:ps/task:0"):
            w = tw.Variable(np.full((2, 2), 2.0, np.float32), name="w")
        with tw.device("/job:worker/task:0"):
            y = tw.matmul(tw.ones([1, 2]), w)
        with tw.Session(config) as sess:
            sess.run(w.initializer)
            assert sess.run(y).tolist() == [[4.0, 4.0]]
            assert sess.placement(y)[y.op.name] == "/job:worker/replica:0/task:0/device:CPU:0"
    assert workers.stop() == [0, 0]
    assert "tensorweave worker stopped: job=ps task=0" in Path(ps.log).read_text()


def test_worker_serves_the_task_tf_config_names(workers):
    _grpc()
    port = _free_run(1)
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0},
                 "rpc_layer": "grpc"}
    t = workers.start(["--resolver", "tf_config"], {"TF_CONFIG": json.dumps(tf_config)}, "worker", 0,
                      f"127.0.0.1:{port}")
    launcher.wait_ready([t], timeout=60)
    r = cr.TFConfigClusterResolver(environ={"TF_CONFIG": json.dumps(tf_config)})
    with tw.Graph().as_default(), tw.Session(r.master()) as sess:
        assert sess.run(tw.constant(3.0) * 2.0) == 6.0
    assert workers.stop() == [0]


def test_config_from_resolver_validates_through_cluster_config(clean_env):
    r = cr.SimpleClusterResolver({"worker": ["127.0.0.1:1"]}, rpc_layer="not a transport")
    with pytest.raises(errors.InvalidArgumentError, match="SimpleClusterResolver: transport: expected a transport name"):
        r.cluster_config()
    with pytest.raises(errors.InvalidArgumentError, match=r"SimpleClusterResolver: \[timeouts\]: unknown key 'conect'"):
        cr.SimpleClusterResolver({"worker": ["h:1"]}).cluster_config(timeouts={"conect": 1.0})
    assert isinstance(cr.SimpleClusterResolver({"worker": ["h:1"]}).cluster_config(auth={"token_env": "T"}),
                      cl.ClusterConfig)
