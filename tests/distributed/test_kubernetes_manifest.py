"""``tensorweave cluster manifest --kubernetes``: the YAML is checked against the Kubernetes API's
own OpenAPI models (the ``kubernetes`` Python client: every key must be a field of its model,
every value of the field's type, and the client's deserializer must accept the object and
give back exactly the same document), and the pods it describes resolve their tasks with
``KubernetesClusterResolver`` to the addresses its Services publish."""

from __future__ import annotations

import copy
import difflib
import json
import os
import re

import pytest

from tensorweave.distributed import manifests
from tensorweave.framework import errors
from tensorweave.tools import cli

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client (tox.ini's test deps) checks the YAML")
yaml = pytest.importorskip("yaml", reason="PyYAML (tox.ini's test deps) reads the YAML")
from kubernetes import client as k8s  # noqa: E402

KINDS = {("v1", "Service"): "V1Service", ("apps/v1", "StatefulSet"): "V1StatefulSet"}
PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float), "datetime": (str,), "date": (str,)}


class Invalid(AssertionError):
    """A manifest the Kubernetes API would refuse."""


def _strict(value, typ: str, path: str) -> None:
    """``value`` against the client's OpenAPI type ``typ``: unknown keys, wrong types."""
    m = re.fullmatch(r"(?:List\[|list\[)(.*)\]", typ)
    if m:
        if not isinstance(value, list):
            raise Invalid(f"{path}: expected a list ({typ}), got {type(value).__name__}")
        for i, v in enumerate(value):
            _strict(v, m.group(1), f"{path}[{i}]")
        return
    m = re.fullmatch(r"(?:Dict\[str, |dict\(str, )(.*)[\])]", typ)
    if m:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise Invalid(f"{path}: expected a map of strings ({typ}), got {value!r}")
        for k, v in value.items():
            _strict(v, m.group(1), f"{path}.{k}")
        return
    if typ == "object":  # IntOrString and free-form fields
        return
    if typ in PRIMITIVES:
        if isinstance(value, bool) and typ != "bool" or not isinstance(value, PRIMITIVES[typ]):
            raise Invalid(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")
        return
    model = getattr(k8s, typ)
    if not isinstance(value, dict):
        raise Invalid(f"{path}: expected an object ({typ}), got {type(value).__name__}")
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            close = difflib.get_close_matches(key, list(by_json), n=1)
            raise Invalid(f"{path}: unknown field {key!r} of {typ}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        _strict(v, model.openapi_types[by_json[key]], f"{path}.{key}")


def validate(doc: dict):
    """The Kubernetes model object of ``doc``, or Invalid."""
    kind = KINDS.get((doc.get("apiVersion"), doc.get("kind")))
    if kind is None:
        raise Invalid(f"unexpected apiVersion/kind {doc.get('apiVersion')!r}/{doc.get('kind')!r}")
    _strict(doc, kind, doc["kind"])
    api = k8s.ApiClient()
    try:
        obj = api.deserialize(json.dumps(doc), kind, "application/json")  # required fields, the client's type checks
    except Exception as e:  # noqa: BLE001 - the client's validation error, whatever its class
        raise Invalid(f"{doc['kind']}: the kubernetes client refuses it: {e}") from e
    back = api.sanitize_for_serialization(obj)
    if back != doc:  # nothing dropped, renamed or converted on the way
        raise Invalid(f"{doc['kind']}: does not survive the client's model unchanged:\n{json.dumps(back, indent=1)}")
    return obj


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_manifest_validates_against_the_kubernetes_models():
    objects = manifests.kubernetes_manifests({"ps": 1, "worker": 3}, name="digits", namespace="ml",
                                             image="registry.example.org/tw:0.1", port=2300,
                                             transport=("grpc", "ucx"), token_env="TW_TOKEN",
                                             image_pull_policy="IfNotPresent")
    docs = _docs(manifests.to_yaml(objects))
    assert docs == objects
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", "digits-ps"), ("StatefulSet", "digits-ps"), ("Service", "digits-worker"),
        ("StatefulSet", "digits-worker")]
    models = [validate(d) for d in docs]
    svc, sts = models[2], models[3]
    assert isinstance(svc, k8s.V1Service) and isinstance(sts, k8s.V1StatefulSet)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True  # headless, DNS at once
    assert sts.spec.replicas == 3 and sts.spec.service_name == "digits-worker"
    assert sts.spec.pod_management_policy == "Parallel"
    assert sts.spec.selector.match_labels == sts.spec.template.metadata.labels == svc.spec.selector
    c = sts.spec.template.spec.containers[0]
    assert c.image == "registry.example.org/tw:0.1" and c.image_pull_policy == "IfNotPresent"
    assert c.command == ["tensorweave", "worker", "--resolver", "kubernetes", "--jobs", "ps=1,worker=3",
                         "--port-base", "2300", "--transport", "grpc", "--tensors-transport", "ucx",
                         "--token-env", "TW_TOKEN"]
    assert c.ports[0].container_port == svc.spec.ports[0].port == 2300
    token = next(e for e in c.env if e.name == "TW_TOKEN")
    assert (token.value_from.secret_key_ref.name, token.value_from.secret_key_ref.key) == ("digits-auth", "token")


@pytest.mark.parametrize("break_it,match", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(imagee="x"),
     r"unknown field 'imagee' of V1Container \(did you mean 'image'\?\)"),
    (lambda d: d["spec"].update(service_name=d["spec"].pop("serviceName")), "unknown field 'service_name'"),
    (lambda d: d["spec"].update(replicas="3"), r"StatefulSet.spec.replicas: expected int, got str"),
    (lambda d: d["spec"].update(replicas=True), r"StatefulSet.spec.replicas: expected int, got bool"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="2222"),
     "containerPort: expected int"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(command="tensorweave worker"),
     r"command: expected a list"),
    (lambda d: d["metadata"].update(labels=["a"]), "labels: expected a map"),
    (lambda d: d["spec"].pop("selector"), "the kubernetes client refuses it"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"), "the kubernetes client refuses it"),
])
def test_the_check_would_catch_a_broken_manifest(break_it, match):
    """The validation is not a formality: unknown fields, Python names instead of the API's,
    wrong types and missing required fields all fail it."""
    sts = next(d for d in manifests.kubernetes_manifests("worker=2") if d["kind"] == "StatefulSet")
    validate(copy.deepcopy(sts))
    broken = copy.deepcopy(sts)
    break_it(broken)
    with pytest.raises(Invalid, match=match):
        validate(broken)
    svc = next(d for d in manifests.kubernetes_manifests("worker=2") if d["kind"] == "Service")
    svc["spec"]["publishNotReadyAddresses"] = "true"
    with pytest.raises(Invalid, match="publishNotReadyAddresses: expected bool"):
        validate(svc)


def _pod_env(container: dict, pod: str, namespace: str, secrets: dict) -> dict:
    """The environment Kubernetes gives the container of ``pod`` (the downward API's fields,
    Secret keys)."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            env[e["name"]] = {"metadata.name": pod, "metadata.namespace": namespace}[src["fieldRef"]["fieldPath"]]
        else:
            ref = src["secretKeyRef"]
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def test_each_pod_resolves_its_task_to_the_address_its_service_publishes(monkeypatch):
    """Every pod of every StatefulSet, given the environment Kubernetes gives it, runs the
    manifest's command line through `tensorweave worker`'s parser and resolver: it finds its
    own task, and every task's address is <pod>.<Service>.<namespace>.svc.cluster.local at
    the port its Service and container open."""
    objects = manifests.kubernetes_manifests("ps=2,worker=3", name="digits", namespace="ml", port=2300,
                                             token_env="TW_TOKEN")
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    sets = [o for o in objects if o["kind"] == "StatefulSet"]
    expected = {}
    for sts in sets:
        svc = services[sts["spec"]["serviceName"]]
        assert svc["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
        port = svc["spec"]["ports"][0]["port"]
        job = sts["metadata"]["labels"]["app.kubernetes.io/component"]
        expected[job] = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.ml.svc.cluster.local:{port}"
                         for i in range(sts["spec"]["replicas"])]
    for sts in sets:
        container = sts["spec"]["template"]["spec"]["containers"][0]
        assert container["readinessProbe"]["tcpSocket"]["port"] == container["ports"][0]["containerPort"]
        job = sts["metadata"]["labels"]["app.kubernetes.io/component"]
        for i in range(sts["spec"]["replicas"]):
            pod = f"{sts['metadata']['name']}-{i}"
            with monkeypatch.context() as m:
                for k in list(os.environ):
                    if k.startswith(("TW_K8S", "POD_NAMESPACE", "TW_CONFIG", "TF_CONFIG")):
                        m.delenv(k)
                m.setenv("HOSTNAME", pod)
                for k, v in _pod_env(container, pod, "ml", {"digits-auth": {"token": "s3cret"}}).items():
                    m.setenv(k, v)
                assert container["command"][0] == "tensorweave"
                args = cli._parser().parse_args(container["command"][1:])
                config = cli._resolver_config(args)
                assert config.task == (job, i)
                assert config.spec.as_dict() == expected
                assert config.token() == "s3cret"


def test_manifest_command(tmp_path, capsys):
    out = tmp_path / "tw.yaml"
    assert cli.main(["cluster", "manifest", "--kubernetes", "--jobs", "ps=1,worker=2", "--image", "tw:test",
                     "--name", "mnist", "--out", str(out)]) == 0
    assert "wrote 4 objects (Service mnist-ps, StatefulSet mnist-ps, Service mnist-worker, StatefulSet " \
           "mnist-worker)" in capsys.readouterr().err
    docs = _docs(out.read_text())
    for d in docs:
        validate(d)
    assert docs[3]["spec"]["template"]["spec"]["containers"][0]["image"] == "tw:test"
    # Standard output, from a cluster config: its jobs, transport and token variable.
    cfg = tmp_path / "cluster.toml"
    cfg.write_text('transport = { control = "grpc", tensors = "ucx" }\n[cluster]\nps = ["a:1"]\n'
                   'worker = ["b:1", "c:1", "d:1"]\n[auth]\ntoken_env = "MY_TOKEN"\n')
    assert cli.main(["cluster", "manifest", "--kubernetes", "--config", str(cfg), "--namespace", "ml"]) == 0
    docs = _docs(capsys.readouterr().out)
    for d in docs:
        validate(d)
    worker = docs[3]
    assert worker["spec"]["replicas"] == 3 and worker["metadata"]["namespace"] == "ml"
    command = worker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--tensors-transport") + 1] == "ucx"
    assert command[command.index("--token-env") + 1] == "MY_TOKEN"


@pytest.mark.parametrize("argv,match", [
    (["--jobs", "ps=1"], "say which cluster manager: --kubernetes"),
    (["--kubernetes", "--jobs", "ps=1,Worker=2"], "job 'Worker' cannot be part of a Kubernetes name"),
    (["--kubernetes", "--jobs", "ps=1", "--name", "My_Cluster"], "must be a DNS label"),
    (["--kubernetes", "--jobs", "ps=1", "--name", "a" * 50], "longer than 52 characters"),
    (["--kubernetes", "--jobs", "ps=1", "--port", "0"], "port must be 1-65535"),
    (["--kubernetes", "--jobs", "ps", "--port", "0"], "not a list of job=count"),
])
def test_manifest_command_errors(argv, match, capsys):
    assert cli.main(["cluster", "manifest", *argv]) == 2
    assert re.search(match, capsys.readouterr().err)


def test_manifest_from_a_config_with_tls_or_a_token_file_says_why_not(tmp_path, capsys):
    for text, match in [('[cluster]\nworker = ["a:1"]\n[tls]\ncert = "c.pem"\nkey = "k.pem"\n',
                         r"\[tls\] files are not carried"),
                        ('[cluster]\nworker = ["a:1"]\n[auth]\ntoken_file = "token"\n', "token_file does not carry"),
                        ('[cluster]\nworker = { 0 = "a:1", 2 = "b:1" }\n',
                         r"job 'worker' is sparse \(task indices \[0, 2\]\)")]:
        cfg = tmp_path / "cluster.toml"
        cfg.write_text(text)
        assert cli.main(["cluster", "manifest", "--kubernetes", "--config", str(cfg)]) == 2
        assert re.search(match, capsys.readouterr().err)


def test_yaml_scalars_round_trip():
    tricky = {"plain": "tensorweave", "yes": "yes", "No": "No", "num": "2222", "float": "1.5", "empty": "",
              "colon": "a: b", "dash": "- x", "hash": "#c", "quote": 'say "hi"', "unicode": "é", "null": "null",
              "tilde": "~", "multi": "a\nb", "spaces": " x ", "star": "*x", "int": 3, "true": True, "list": [],
              "map": {}, "nested": [{"a": [1, "2", {"b": None}]}, ["x", "y"]]}
    assert yaml.safe_load(manifests.to_yaml([tricky])) == tricky


def test_kubernetes_manifests_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="image"):
        manifests.kubernetes_manifests("worker=1", image="has space")
    with pytest.raises(errors.InvalidArgumentError, match="token_env"):
        manifests.kubernetes_manifests("worker=1", token_env="1BAD")
    with pytest.raises(errors.InvalidArgumentError, match="transport must be a name"):
        manifests.kubernetes_manifests("worker=1", transport=3)
