"""The namespaces a pod asks for are given (the host's, or joined) or refused with
the pod fields to set, never dropped; other clients' are ignored."""

from __future__ import annotations

import pytest

from hostjob.errors import ConfigError
from hostjob.spec import runtime as wire
from hostjob.specconv import pods
from hostjob.specconv.convert import HostFacts, to_job_config
from tests.helpers import base_config

CONTAINER = {"io.kubernetes.cri.container-type": "container"}
SANDBOX = {"io.kubernetes.cri.container-type": "sandbox"}
CRIO_CONTAINER = {"io.kubernetes.cri-o.ContainerType": "container"}
JOIN = {"io.hostjob.pod-namespaces": "join"}
ALL_HOST = {"network", "ipc", "uts", "pid"}

# What containerd gives a container: the sandbox's namespaces by path, a new mount namespace.
CONTAINER_ENTRIES = [
    ("pid", "/proc/10/ns/pid"),
    ("ipc", "/proc/10/ns/ipc"),
    ("uts", "/proc/10/ns/uts"),
    ("mount", None),
    ("network", "/var/run/netns/cni-1"),
]
IDS = {path: (4, n) for n, (_k, path) in enumerate(CONTAINER_ENTRIES) if path}


def decide(annotations: dict[str, str], entries=CONTAINER_ENTRIES, on_host=ALL_HOST):  # type: ignore[no-untyped-def]
    return pods.pod_namespaces(annotations, entries, set(on_host), IDS)


def test_a_host_process_pod_joins_nothing() -> None:
    assert decide(CONTAINER) == []


@pytest.mark.parametrize(
    ("on_host", "line"),
    [
        (
            {"network", "uts", "ipc"},
            "the pod asks for its own PID namespace, which a job container cannot give"
            " (it runs in the host's): set hostPID: true in the pod spec",
        ),
        (
            {"network", "uts", "pid"},
            "the pod asks for its own IPC namespace, which a job container cannot give"
            " (it runs in the host's): set hostIPC: true in the pod spec, or the pod"
            " annotation io.hostjob.pod-namespaces: join to join the pod's network, IPC and"
            " UTS namespaces",
        ),
        (
            set(),
            "the pod asks for its own network, UTS, IPC and PID namespaces, which a job"
            " container cannot give (it runs in the host's): set hostNetwork: true,"
            " hostIPC: true and hostPID: true in the pod spec, or the pod annotation"
            " io.hostjob.pod-namespaces: join to join the pod's network, IPC and UTS"
            " namespaces",
        ),
    ],
)
def test_what_a_job_container_cannot_give_is_refused(on_host: set[str], line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decide(CONTAINER, on_host=on_host)
    assert str(caught.value) == f"linux.namespaces: {line}"
    assert "\n" not in str(caught.value)


def test_a_sandboxs_new_namespaces_are_refused() -> None:
    """The sandbox of a pod on the pod network: no path means a new namespace; presence
    alone decides nothing."""
    entries = [("pid", None), ("ipc", None), ("uts", None), ("network", "/var/run/netns/x")]
    with pytest.raises(ConfigError, match="hostNetwork: true, hostIPC: true and hostPID: true"):
        decide(SANDBOX, entries=entries, on_host=set())
    # hostNetwork + hostIPC + hostPID: containerd leaves those entries out of the sandbox
    assert decide(SANDBOX, entries=[("mount", None)], on_host=set()) == []


def test_a_path_less_entry_is_refused_even_when_the_host_has_that_type() -> None:
    # on_host says the types whose *path* is the host's: a path-less one is never in it
    with pytest.raises(ConfigError, match="hostPID: true"):
        decide(CONTAINER, entries=[("pid", None)], on_host=set())


def test_cri_o_containers_are_pods_too() -> None:
    with pytest.raises(ConfigError, match="hostPID"):
        decide(CRIO_CONTAINER, entries=[("pid", None)], on_host=set())


def test_user_namespaces_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"its own user namespace.*hostUsers: true"):
        decide(CONTAINER, entries=[("user", None)], on_host=set())


def test_join_gives_network_ipc_and_uts_with_their_identity() -> None:
    joined = decide({**CONTAINER, **JOIN}, on_host={"pid"})
    assert [(n.type, n.path, n.device, n.inode) for n in joined] == [
        ("ipc", "/proc/10/ns/ipc", 4, 1),
        ("uts", "/proc/10/ns/uts", 4, 2),
        ("network", "/var/run/netns/cni-1", 4, 4),
    ]


def test_join_never_gives_a_pid_namespace() -> None:
    with pytest.raises(ConfigError) as caught:
        decide({**CONTAINER, **JOIN}, on_host=set())
    assert "set hostPID: true in the pod spec" in str(caught.value)
    assert "io.hostjob.pod-namespaces" not in str(caught.value)  # already asked for


def test_join_of_a_missing_namespace_is_an_error() -> None:
    entries = [("network", "/var/run/netns/gone")]
    with pytest.raises(ConfigError, match="network namespace /var/run/netns/gone does not exist"):
        decide({**CONTAINER, **JOIN}, entries=entries, on_host=set())


def test_the_annotation_takes_join_only() -> None:
    with pytest.raises(ConfigError, match=r"annotations.io.hostjob.pod-namespaces: must be 'join'"):
        decide({**CONTAINER, "io.hostjob.pod-namespaces": "yes"})


def test_a_joining_pods_sandbox_goes_to_the_real_runtime() -> None:
    assert not pods.is_job_container({**SANDBOX, **JOIN})
    assert pods.is_job_container({**CONTAINER, **JOIN})
    assert pods.is_job_container(SANDBOX)


def spec(annotations: dict[str, str], namespaces: list[dict[str, str]]) -> wire.Spec:
    config = base_config()
    config["annotations"] = annotations
    config["linux"] = {"namespaces": namespaces}
    return wire.Spec.decode(config)


def test_other_clients_namespaces_are_ignored() -> None:
    job = to_job_config(spec({}, [{"type": "pid"}, {"type": "network"}]), "/b", "c1")
    assert not job.pod_namespaces


def test_the_conversion_refuses_a_pods_container() -> None:
    with pytest.raises(ConfigError, match="hostNetwork: true"):
        to_job_config(spec(CONTAINER, [{"type": "network"}]), "/b", "c1", HostFacts())


def test_the_conversion_keeps_what_is_joined() -> None:
    facts = HostFacts()
    facts.namespaces_on_host = {"pid"}
    facts.namespace_ids = {"/var/run/netns/n": (3, 99)}
    namespaces = [{"type": "pid", "path": "/proc/1/ns/pid"}]
    namespaces.append({"type": "network", "path": "/var/run/netns/n"})
    job = to_job_config(spec({**CONTAINER, **JOIN}, namespaces), "/b", "c1", facts)
    assert job.pod_namespaces is not None
    assert [(n.type, n.path, n.device, n.inode) for n in job.pod_namespaces] == [
        ("network", "/var/run/netns/n", 3, 99)
    ]
    again = type(job).decode(job.to_json())  # the record keeps it
    assert again.pod_namespaces is not None and again.pod_namespaces[0].inode == 99


# The operator's default per runtime handler: `--default-pod-namespaces join`.
DEFAULT_JOIN = {"io.hostjob.pod-namespaces": "join"}


def test_the_operators_default_joins_a_pods_namespaces() -> None:
    facts = HostFacts()
    facts.namespaces_on_host = {"pid"}
    facts.namespace_ids = {"/var/run/netns/n": (3, 99), "/proc/7/ns/ipc": (3, 5)}
    namespaces = [{"type": "pid", "path": "/proc/1/ns/pid"}]
    namespaces += [{"type": "network", "path": "/var/run/netns/n"}]
    namespaces += [{"type": "ipc", "path": "/proc/7/ns/ipc"}]
    plain = spec(CONTAINER, namespaces)
    with pytest.raises(ConfigError, match=r"io\.hostjob\.pod-namespaces: join"):
        to_job_config(plain, "/b", "c1", facts)  # no default: refused, naming the annotation
    job = to_job_config(plain, "/b", "c1", facts, DEFAULT_JOIN)
    assert job.pod_namespaces is not None
    assert [n.type for n in job.pod_namespaces] == ["network", "ipc"]
    assert "io.hostjob.pod-namespaces" not in job.annotations  # the config's, as given


def test_the_default_still_refuses_a_pods_own_pid_namespace() -> None:
    facts = HostFacts()
    facts.namespace_ids = {"/proc/7/ns/pid": (3, 1)}
    pid_of_pod = spec(CONTAINER, [{"type": "pid", "path": "/proc/7/ns/pid"}])
    with pytest.raises(ConfigError) as caught:
        to_job_config(pid_of_pod, "/b", "c1", facts, DEFAULT_JOIN)
    assert "set hostPID: true in the pod spec" in str(caught.value)


def test_under_the_default_a_pods_sandbox_goes_to_the_real_runtime() -> None:
    sandbox = base_config()
    sandbox["annotations"] = dict(SANDBOX)
    assert pods.delegated(sandbox, "join")
    assert not pods.delegated(sandbox)
    other = base_config()  # not a pod's: the setting means nothing for it
    other["annotations"] = {}
    assert not pods.delegated(other, "join")
    assert pods.with_pod_default({}, "join") == {}
    with pytest.raises(ConfigError, match="must be 'join'"):  # a pod's own value still checked
        pods.delegated({"annotations": {**SANDBOX, "io.hostjob.pod-namespaces": "no"}}, "join")
