"""Many pods at once, as a kubelet starts and deletes them (its pod workers run in parallel)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from cri_api.v1 import api_pb2 as cri

from .kubelet import CALL_TIMEOUT, Node, Pod, Resources
from .test_kubernetes import host_paths, paths_left
from .test_pods import IDLE, sh

PODS = 20


def test_pods_created_and_removed_concurrently(kubelet_node: Node) -> None:
    """20 pods (BestEffort and Burstable) created, run and deleted concurrently: each container
    runs and logs, each pod deletion succeeds, and nothing of any of them is left -- not even
    the mount point their bind-mode containers share on the host (``/hpc``), made by the first
    and removed by the last; the token volume's target is never made there."""
    node = kubelet_node
    before = host_paths()
    pods = [
        node.pod(
            f"many-{i}",
            [Resources(memory_limit=32 << 20) if i % 2 else Resources()],
        )
        for i in range(PODS)
    ]

    def life(pod: Pod) -> tuple[list[str], list[str], list[str]]:
        pod.run()
        c = pod.run_container("main", sh(f"echo hello-{pod.name}; {IDLE}"))
        lines = [t for _, _, t in pod.wait_log(c, "ready", timeout=120)]
        ids = [pod.sandbox_id, c.id]
        return ids, lines, pod.delete(grace=10)

    with ThreadPoolExecutor(max_workers=PODS) as pool:
        results = list(pool.map(life, pods))

    for pod, (_, lines, problems) in zip(pods, results, strict=True):
        assert lines == [f"hello-{pod.name}", "ready"], (pod, lines)
        assert not problems, (pod, problems)
    listed = node.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=CALL_TIMEOUT)
    assert not listed.items
    for pod, (ids, _, _) in zip(pods, results, strict=True):
        left = node.leftovers(pod, ids)
        assert not left, (pod, left)
    assert not paths_left(before)
