"""``deploy/``: the manifests ``kubectl apply -f deploy/`` reads, checked as far as can be
without an API server: each document parsed as YAML, every field a name the Kubernetes
API has for that object (a misspelt field is silently dropped by a lenient apply), and the
installer's pod consistent with the ``hostjob node`` command it runs and the handlers it
installs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hostjob.cli.commands import node as node_command
from hostjob.node import containerd, install

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

ANY = "*"  # a map of free keys (labels, annotations)
META = {"name": str, "namespace": str, "labels": ANY, "annotations": ANY}
SELECTOR_TERM = {"matchExpressions": [{"key": str, "operator": str, "values": [str]}]}
CONTAINER = {
    "name": str,
    "image": str,
    "imagePullPolicy": str,
    "command": [str],
    "args": [str],
    "env": [{"name": str, "value": str}],
    "securityContext": {"privileged": bool},
    "resources": {"requests": ANY, "limits": ANY},
    "volumeMounts": [{"name": str, "mountPath": str, "mountPropagation": str, "readOnly": bool}],
}
POD_SPEC = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [SELECTOR_TERM]}
        }
    },
    "nodeSelector": ANY,
    "hostPID": bool,
    "hostNetwork": bool,
    "priorityClassName": str,
    "terminationGracePeriodSeconds": int,
    "tolerations": [{"key": str, "operator": str, "effect": str, "value": str}],
    "containers": [CONTAINER],
    "volumes": [{"name": str, "hostPath": {"path": str, "type": str}}],
}
KINDS: dict[tuple[str, str], dict[str, Any]] = {
    ("v1", "Namespace"): {"metadata": META},
    ("apps/v1", "DaemonSet"): {
        "metadata": META,
        "spec": {
            "selector": {"matchLabels": ANY},
            "updateStrategy": {"type": str, "rollingUpdate": {"maxUnavailable": int}},
            "template": {"metadata": META, "spec": POD_SPEC},
        },
    },
    ("node.k8s.io/v1", "RuntimeClass"): {
        "metadata": META,
        "handler": str,
        "scheduling": {"nodeSelector": ANY, "tolerations": [dict]},
    },
}


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return found


def unknown_fields(value: Any, schema: Any, where: str) -> list[str]:
    """The fields of ``value`` that ``schema`` (the API's names and value types) lacks."""
    if schema == ANY:
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        return [] if ok else [f"{where}: not a map of strings"]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        out = []
        for name, item in value.items():
            if name not in schema:
                out.append(f"{where}.{name}: not a field of the API")
            else:
                out += unknown_fields(item, schema[name], f"{where}.{name}")
        return out
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [
            e for i, v in enumerate(value) for e in unknown_fields(v, schema[0], f"{where}[{i}]")
        ]
    ok = isinstance(value, schema) and not (schema is int and isinstance(value, bool))
    return [] if ok else [f"{where}: not a {schema.__name__}"]


def test_every_field_is_one_the_kubernetes_api_has() -> None:
    docs = documents()
    assert {(d["apiVersion"], d["kind"]) for d in docs} == set(KINDS)
    for doc in docs:
        schema = KINDS[doc["apiVersion"], doc["kind"]]
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
        assert unknown_fields(body, schema, doc["kind"]) == []


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def test_the_runtime_classes_are_the_handlers_the_installer_adds() -> None:
    classes = {d["metadata"]["name"]: d["handler"] for d in by_kind("RuntimeClass")}
    handlers = containerd.handlers_of(f"{install.INSTALL_DIR}/bin")
    assert classes == {name: name for name in handlers}


def test_the_installer_pod_runs_the_node_command_it_documents() -> None:
    (namespace,) = by_kind("Namespace")
    (daemonset,) = by_kind("DaemonSet")
    meta, spec = daemonset["metadata"], daemonset["spec"]
    assert meta["namespace"] == namespace["metadata"]["name"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    template = spec["template"]
    labels = template["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = template["spec"]
    assert pod["hostPID"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    command = container["command"]
    assert command[:3] == [f"{install.INSTALL_DIR}/bin/hostjob", "node", "serve"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    known = {f"--{o.names[0]}" for o in node_command.COMMAND.options}
    assert set(flags) <= known, set(flags) - known
    # the host's root, whole, where --host-root says
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    root = mounts[flags["--host-root"]]
    assert volumes[root["name"]]["hostPath"]["path"] == "/"
    assert root.get("readOnly") is not True
    # the pod's termination waits for the uninstall: containerd's restart, then the jobs
    needed = float(flags.get("--timeout", "120")) * 2 + float(flags.get("--wait-for-jobs", "0"))
    assert pod["terminationGracePeriodSeconds"] >= needed


def test_node_selection_by_label() -> None:
    """Every Linux node, but one labelled ``io.hostjob.node=false`` (docs/operators.md)."""
    (daemonset,) = by_kind("DaemonSet")
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (term,) = terms
    expressions = {e["key"]: (e["operator"], e["values"]) for e in term["matchExpressions"]}
    assert expressions == {
        "kubernetes.io/os": ("In", ["linux"]),
        "io.hostjob.node": ("NotIn", ["false"]),
    }
    guide = (DEPLOY.parent / "docs" / "operators.md").read_text()
    assert "io.hostjob.node=false" in guide
