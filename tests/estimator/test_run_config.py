"""tw.estimator.RunConfig: defaults, replace, and the cluster properties read from TF_CONFIG /
TW_CONFIG as TF1 defines them."""

import json

import pytest

import tensorweave as tw
import tensorweave.estimator as est

CLUSTER = {"chief": ["127.0.0.1:2220"], "worker": ["127.0.0.1:2221", "127.0.0.1:2222"],
           "ps": ["127.0.0.1:2223", "127.0.0.1:2224"]}


@pytest.fixture(autouse=True)
def _no_cluster_env(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TW_CONFIG", raising=False)


def _with(monkeypatch, var, obj):
    monkeypatch.setenv(var, json.dumps(obj))
    return est.RunConfig()


def test_local_defaults_and_replace():
    c = est.RunConfig()
    assert (c.task_type, c.task_id, c.is_chief, c.master, c.num_ps_replicas, c.num_worker_replicas) == (
        "worker", 0, True, "", 0, 1)
    assert not c.cluster_spec and c.cluster_config is None
    assert (c.save_checkpoints_secs, c.save_checkpoints_steps, c.save_summary_steps, c.keep_checkpoint_max,
            c.log_step_count_steps, c.model_dir, c.tf_random_seed) == (600, None, 100, 5, 100, None, None)
    d = c.replace(save_checkpoints_steps=50, model_dir="/tmp/m", tf_random_seed=3)
    assert (d.save_checkpoints_steps, d.save_checkpoints_secs, d.model_dir, d.tf_random_seed) == (50, None, "/tmp/m", 3)
    assert c.save_checkpoints_secs == 600   # the original is unchanged
    with pytest.raises(tw.errors.InvalidArgumentError, match="both save_checkpoints_steps and save_checkpoints_secs"):
        est.RunConfig(save_checkpoints_steps=10, save_checkpoints_secs=10)
    with pytest.raises(tw.errors.InvalidArgumentError, match="replacing 'task_type' is not supported"):
        c.replace(task_type="ps")
    with pytest.raises(tw.errors.InvalidArgumentError, match="session_config must be a tw.ConfigProto"):
        est.RunConfig(session_config={"allow_soft_placement": True})


def test_tf_config_worker_of_a_cluster(monkeypatch):
    c = _with(monkeypatch, "TF_CONFIG", {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}})
    assert (c.task_type, c.task_id, c.is_chief) == ("worker", 1, False)
    assert c.master == "grpc://127.0.0.1:2222"
    assert (c.num_ps_replicas, c.num_worker_replicas, c.global_id_in_cluster) == (2, 3, 2)
    assert sorted(c.cluster_spec.jobs) == ["chief", "ps", "worker"] and c.cluster_config.task == ("worker", 1)
    chief = _with(monkeypatch, "TF_CONFIG", {"cluster": CLUSTER, "task": {"type": "chief", "index": 0},
                                             "rpc_layer": "ucx", "model_dir": "/tmp/shared"})
    assert chief.is_chief and chief.master == "ucx://127.0.0.1:2220" and chief.global_id_in_cluster == 0
    assert chief.model_dir == "/tmp/shared"
    ps = _with(monkeypatch, "TF_CONFIG", {"cluster": CLUSTER, "task": {"type": "ps", "index": 1}})
    assert not ps.is_chief and ps.global_id_in_cluster == 4


def test_tw_config_wins_and_may_name_the_transport(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER, "task": {"type": "ps", "index": 0}}))
    c = _with(monkeypatch, "TW_CONFIG", {"cluster": CLUSTER, "task": {"type": "chief", "index": 0},
                                         "transport": "ucx", "health_check_interval": 0.5})
    assert c.task_type == "chief" and c.master == "ucx://127.0.0.1:2220"
    assert c.cluster_config.health_check_interval == 0.5


def test_evaluator_is_not_part_of_the_cluster(monkeypatch):
    c = _with(monkeypatch, "TF_CONFIG", {"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}})
    assert (c.task_type, c.is_chief, c.master, c.num_ps_replicas, c.num_worker_replicas) == (
        "evaluator", False, "", 0, 0)
    assert not c.cluster_spec


def test_legacy_master_job_is_the_chief(monkeypatch):
    c = _with(monkeypatch, "TF_CONFIG", {"cluster": {"master": ["127.0.0.1:2230"], "ps": ["127.0.0.1:2231"]},
                                         "task": {"type": "master", "index": 0}})
    assert c.is_chief and c.num_worker_replicas == 1 and c.num_ps_replicas == 1


@pytest.mark.parametrize("obj, message", [
    ({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}},
     "must have one 'chief' task"),
    ({"cluster": CLUSTER}, "'task' must name this process's task"),
    ({"cluster": CLUSTER, "task": {"type": "trainer", "index": 0}}, "'trainer' is not a job of the cluster"),
    ({"cluster": CLUSTER, "task": {"type": "worker", "index": 5}}, "has no task 5"),
    ({"cluster": {**CLUSTER, "chief": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "ps", "index": 0}},
     "exactly one task"),
    ({"task": {"type": "ps", "index": 0}}, "without a 'cluster', the task type must be 'worker'"),
    ({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 1}}, "only be one evaluator"),
])
def test_bad_cluster_configs(monkeypatch, obj, message):
    monkeypatch.setenv("TF_CONFIG", json.dumps(obj))
    with pytest.raises(tw.errors.InvalidArgumentError, match=message):
        est.RunConfig()


def test_invalid_json_names_the_variable(monkeypatch):
    monkeypatch.setenv("TW_CONFIG", "{not json")
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"\$TW_CONFIG: not valid JSON"):
        est.RunConfig()
