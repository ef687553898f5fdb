"""Kubernetes manifests for a cluster: one StatefulSet and one headless Service per job.

Owns ``kubernetes_manifests(jobs, ...)`` (the objects, as dicts of the Kubernetes API) and
``to_yaml(objects)`` (a multi-document YAML stream, written here: the core has no YAML
dependency). Each pod runs ``tensorweave worker --resolver kubernetes``, which finds its task
from the pod's name and namespace (``resolvers.KubernetesClusterResolver``; the naming scheme
is documented there and in docs/distributed.md, "Cluster managers"). ``tensorweave cluster
manifest --kubernetes`` prints them.

Choices, each for a reason:

* ``clusterIP: None`` (headless) gives every pod the DNS name
  ``<pod>.<service>.<namespace>.svc.<domain>`` that the resolver's addresses use, and
  ``publishNotReadyAddresses: true`` publishes it before the pod is ready: tasks must reach
  each other to start at all.
* ``podManagementPolicy: Parallel``: every task starts at once (masters wait for the tasks
  they need), instead of one pod after another.
* The readiness probe is a TCP connect to the task's port, which its server opens when it is
  ready to serve.
"""

from __future__ import annotations

import json
import re

from tensorweave.distributed import resolvers
from tensorweave.framework import errors

DEFAULT_NAME = "tensorweave"
DEFAULT_IMAGE = "tensorweave:latest"
CONTAINER_NAME = "tensorweave"
PORT_NAME = "tensorweave"
TOKEN_SECRET_KEY = "token"
_DNS_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A StatefulSet's pods carry a controller-revision-hash label "<set>-<10 chars>", and label
# values are at most 63 characters.
_MAX_SET_NAME = 52


def _transport_arg(transport) -> list[str]:
    if isinstance(transport, str):
        return ["--transport", transport]
    if isinstance(transport, (tuple, list)) and len(transport) == 2:
        control, tensors = transport
        return ["--transport", control] + (["--tensors-transport", tensors] if tensors != control else [])
    if isinstance(transport, dict) and set(transport) == {"control", "tensors"}:
        return _transport_arg((transport["control"], transport["tensors"]))
    raise errors.InvalidArgumentError(
        f"manifest: transport must be a name or {{control = ..., tensors = ...}}, got {transport!r}")


def kubernetes_manifests(jobs, *, name: str = DEFAULT_NAME, image: str = DEFAULT_IMAGE, namespace: str | None = None,
                         port: int = resolvers.K8S_DEFAULT_PORT, transport="grpc", token_env: str | None = None,
                         cluster_domain: str | None = None, image_pull_policy: str | None = None) -> list[dict]:
    """A headless Service and a StatefulSet per job (``{"ps": 1, "worker": 2}`` or
    ``"ps=1,worker=2"``), in job order, as Kubernetes API objects (dicts).

    ``name`` prefixes every object (``<name>-<job>``); ``transport`` is the cluster's (a name
    or a (control, tensors) pair); ``token_env`` names the environment variable the tasks
    read their auth token from, filled from the Secret ``<name>-auth`` (key ``token``).
    """
    jobs = resolvers.parse_jobs(jobs, "manifest jobs")
    if not isinstance(name, str) or not _DNS_LABEL_RE.match(name):
        raise errors.InvalidArgumentError(
            f"manifest: name {name!r} must be a DNS label: lowercase letters, digits and '-', starting with a letter")
    if namespace is not None and not _DNS_LABEL_RE.match(namespace or ""):
        raise errors.InvalidArgumentError(f"manifest: namespace {namespace!r} is not a DNS label")
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        raise errors.InvalidArgumentError(f"manifest: image {image!r} is not an image reference")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise errors.InvalidArgumentError(f"manifest: port must be 1-65535, got {port!r}")
    if token_env is not None and not _ENV_NAME_RE.match(token_env):
        raise errors.InvalidArgumentError(f"manifest: token_env {token_env!r} is not an environment variable name")
    if image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
        raise errors.InvalidArgumentError(
            f"manifest: image_pull_policy must be Always, IfNotPresent or Never, got {image_pull_policy!r}")
    for job in jobs:
        if not re.fullmatch(r"[a-z0-9]+", job):
            raise errors.InvalidArgumentError(
                f"manifest: job {job!r} cannot be part of a Kubernetes name (lowercase letters and digits only)")
        set_name = resolvers.kubernetes_set_name(name, job)
        if len(set_name) > _MAX_SET_NAME:
            raise errors.InvalidArgumentError(
                f"manifest: {set_name!r} is longer than {_MAX_SET_NAME} characters (a StatefulSet's name must "
                "leave room for its pods' labels); choose a shorter --name")

    command = ["tensorweave", "worker", "--resolver", "kubernetes", "--jobs", resolvers._format_jobs(jobs),
               "--port-base", str(port), *_transport_arg(transport)]
    if token_env is not None:
        command += ["--token-env", token_env]
    env = [{"name": "TW_K8S_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "TW_K8S_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    if cluster_domain:
        env.append({"name": resolvers.K8S_DOMAIN_VAR, "value": cluster_domain})
    if token_env is not None:
        env.append({"name": token_env,
                    "valueFrom": {"secretKeyRef": {"name": f"{name}-auth", "key": TOKEN_SECRET_KEY}}})

    objects = []
    for job, replicas in jobs.items():
        set_name = resolvers.kubernetes_set_name(name, job)
        labels = {"app.kubernetes.io/name": "tensorweave", "app.kubernetes.io/instance": name,
                  "app.kubernetes.io/component": job}
        meta = {"name": set_name, **({"namespace": namespace} if namespace is not None else {}),
                "labels": dict(labels)}
        objects.append({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": dict(labels),
                "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
            },
        })
        container = {
            "name": CONTAINER_NAME,
            "image": image,
            "command": list(command),
            "env": [dict(e) for e in env],
            "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 5},
        }
        if image_pull_policy is not None:
            container["imagePullPolicy"] = image_pull_policy
        objects.append({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": dict(meta),
            "spec": {
                "serviceName": set_name,
                "replicas": replicas,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {"containers": [container]},
                },
            },
        })
    return objects


def manifests_from_config(config, **kwargs) -> list[dict]:
    """The manifests of a ``ClusterConfig``: its jobs with as many replicas as tasks, its
    transport, and its ``[auth] token_env``. Its addresses are replaced by the Kubernetes
    scheme; TLS files and a token file do not carry over (an error says so)."""
    spec = config.spec
    jobs = {}
    for job in spec.jobs:
        indices = spec.task_indices(job)
        if indices != list(range(len(indices))):
            raise errors.InvalidArgumentError(
                f"{config.source}: job {job!r} is sparse (task indices {indices}); a StatefulSet's pods are "
                "numbered 0, 1, ... without gaps")
        jobs[job] = len(indices)
    if config.tls is not None:
        raise errors.InvalidArgumentError(
            f"{config.source}: [tls] files are not carried into Kubernetes manifests; leave [tls] out, or add the "
            "certificate Secret's volume and [tls] paths to the StatefulSets yourself")
    if config.token_file is not None:
        raise errors.InvalidArgumentError(
            f"{config.source}: [auth] token_file does not carry into Kubernetes manifests; use token_env = \"VAR\" "
            "(the manifest fills VAR from the Secret <name>-auth)")
    kwargs.setdefault("transport", config.transport)
    if config.token_env is not None:
        kwargs.setdefault("token_env", config.token_env)
    return kubernetes_manifests(jobs, **kwargs)


# ----------------------------------------------------------------------------------------
# YAML

_PLAIN_RE = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_./-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        if _PLAIN_RE.match(v) and v.lower() not in _YAML_WORDS:
            return v
        return json.dumps(v)  # a JSON string is a YAML double-quoted scalar
    if v is None:
        return "null"
    raise TypeError(f"cannot write {type(v).__name__} as YAML")


def _emit(value, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    if isinstance(value, dict):
        for k, v in value.items():
            key = _scalar(str(k))
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{key}:")
                _emit(v, indent + 2 if isinstance(v, dict) else indent, lines)
            else:
                lines.append(f"{pad}{key}: {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                sub: list[str] = []
                _emit(item, indent + 2, sub)
                lines.append(f"{pad}- {sub[0][indent + 2:]}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_empty(item) if isinstance(item, (dict, list)) else _scalar(item)}")
    else:
        lines.append(pad + _scalar(value))


def _empty(v) -> str:
    return "{}" if isinstance(v, dict) else "[]"


def to_yaml(objects: list[dict]) -> str:
    """The objects as one YAML stream, ``---`` between documents (``kubectl apply -f`` reads it)."""
    docs = []
    for obj in objects:
        lines: list[str] = []
        _emit(obj, 0, lines)
        docs.append("\n".join(lines) + "\n")
    return "---\n".join(docs)
