"""A CNI plugin for tests/cri: a pod network namespace with a link of its own, and nothing
outside it.

containerd's CRI plugin calls CNI for every pod that is not on the host's network, and
refuses such a pod (and reports ``NetworkReady=false``) without a network configuration.
The conformance suite needs such pods -- runc gives them; a job container refuses them -- so
``conftest.py`` configures this plugin under two names: ``loopback`` (containerd adds the
``lo`` network to every pod) brings ``lo`` up, ``hostjob-test-net`` makes a veth pair with both
ends *inside* the pod's namespace and gives ``eth0`` an address. No link, route or address is
ever added on the host: the plugin refuses a namespace that is the host's own, and everything
it made goes with the namespace (DEL has nothing to do).

The CNI protocol: the command and namespace in the environment (``CNI_COMMAND``,
``CNI_NETNS``, ``CNI_IFNAME``), the network configuration on stdin, the result (or an error)
as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

POD_ADDRESS = "10.233.0.2/24"
VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]


class PluginError(Exception):
    pass


def _ns_identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _in_netns(netns: str, *argv: str) -> None:
    done = subprocess.run(
        ["nsenter", f"--net={netns}", *argv], capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        raise PluginError(f"{' '.join(argv)}: {done.stderr.strip()}")


def add(kind: str, version: str) -> dict[str, object]:
    netns = os.environ.get("CNI_NETNS", "")
    ifname = os.environ.get("CNI_IFNAME", "eth0")
    if not netns:
        raise PluginError("CNI_NETNS is not set")
    if _ns_identity(netns) == _ns_identity("/proc/self/ns/net"):
        raise PluginError(f"{netns} is the host's network namespace: refusing to change it")
    if kind == "loopback":
        _in_netns(netns, "ip", "link", "set", "lo", "up")
        address, ifname = "127.0.0.1/8", "lo"
    else:
        peer = f"{ifname[:10]}-peer"
        _in_netns(netns, "ip", "link", "add", ifname, "type", "veth", "peer", "name", peer)
        _in_netns(netns, "ip", "address", "add", POD_ADDRESS, "dev", ifname)
        _in_netns(netns, "ip", "link", "set", peer, "up")
        _in_netns(netns, "ip", "link", "set", ifname, "up")
        address = POD_ADDRESS
    ip: dict[str, object] = {"address": address, "interface": 0}
    if version != "1.0.0":
        ip["version"] = "4"
    return {
        "cniVersion": version,
        "interfaces": [{"name": ifname, "sandbox": netns}],
        "ips": [ip],
        "dns": {},
    }


def main() -> int:
    kind = os.path.basename(sys.argv[1]) if len(sys.argv) > 1 else "hostjob-test-net"
    command = os.environ.get("CNI_COMMAND", "")
    text = sys.stdin.read() if command != "VERSION" else ""
    config = json.loads(text) if text.strip() else {}
    version = str(config.get("cniVersion", "0.4.0"))
    try:
        if command == "VERSION":
            result: dict[str, object] = {"cniVersion": "1.0.0", "supportedVersions": VERSIONS}
        elif command == "ADD":
            result = add(kind, version)
        elif command in ("DEL", "CHECK", "GC", "STATUS"):
            return 0  # what ADD made lives and dies with the pod's namespace
        else:
            raise PluginError(f"unknown CNI_COMMAND {command!r}")
    except (PluginError, OSError, subprocess.SubprocessError) as e:
        json.dump({"cniVersion": version, "code": 999, "msg": str(e)}, sys.stdout)
        return 1
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
