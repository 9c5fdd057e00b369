"""What each client sends the runtime, recorded: hostjob knows every ``config.json`` key.

A newer client (containerd 2.x, podman 5) writes configs of a newer runtime-spec and calls
the runtime with newer flags. hostjob must give each field, refuse it with one line, or
name it in its one warning line -- never drop it unread. Its decoder tolerates keys it does
not know (as runtime-spec requires of a runtime), so nothing would say so: these tests put
a recorder in front of hostjob (the runtime the client is given), which keeps every command
line and each bundle's ``config.json`` and then runs hostjob, and check the recorded configs
against hostjob's wire models (``hostjob.spec.runtime``): a key none of them has is one
hostjob never reads. The flags are known when the client's run succeeds (hostjob refuses a
flag it does not know, with one line).
"""

from __future__ import annotations

import json
from pathlib import Path

from hostjob.spec import _decode
from hostjob.spec import runtime as wire

from . import harness
from .image import OCIImage

RECORDER = """#!/bin/sh
# The compat suite's recorder: keeps what the client asks the runtime, then runs hostjob.
d={dir}
n=$(date +%s%N)-$$
printf '%s\\n' "$@" >"$d/argv-$n"
prev=
for a in "$@"; do
    case "$prev" in --bundle | -b) cp "$a/config.json" "$d/config-$n.json" 2>/dev/null ;; esac
    case "$a" in --bundle=*) cp "${{a#--bundle=}}/config.json" "$d/config-$n.json" 2>/dev/null ;; esac
    prev=$a
done
exec {hostjob} "$@"
"""


VERBS = {"create", "start", "delete", "run", "exec", "kill", "state", "features", "ps"}


def recorder(tmp_path: Path, compat_workdir: Path) -> tuple[harness.Runtime, Path]:
    hostjob = harness.make_runtime("hostjob", compat_workdir)
    seen = tmp_path / "seen"
    seen.mkdir()
    script = tmp_path / "hostjob"
    script.write_text(RECORDER.format(dir=seen, hostjob=hostjob.client_path))
    script.chmod(0o755)
    return harness.Runtime("hostjob", script, is_job_container=True), seen


def nested(decoder: object) -> type[_decode.Model] | None:
    """The model a ``FIELDS`` decoder decodes into (directly, or as a list's or a map's
    items), or None for a leaf (a string, a number, a raw JSON object)."""
    owner = getattr(decoder, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, _decode.Model):
        return owner
    for cell in getattr(decoder, "__closure__", None) or ():
        found = nested(cell.cell_contents) if callable(cell.cell_contents) else None
        if found is not None:
            return found
    return None


def unknown_keys(doc: object, model: type[_decode.Model], path: str = "") -> list[str]:
    """The JSON paths of ``doc``'s keys that ``model`` (and the models under it) lack."""
    if not isinstance(doc, dict):
        return []
    fields = {key: decoder for key, _attr, decoder in model.FIELDS}
    found = []
    for key, value in doc.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            found.append(where)
            continue
        inner = nested(fields[key])
        if inner is None:
            continue
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            at = f"{where}[{i}]" if isinstance(value, list) else where
            found += unknown_keys(item, inner, at)
    return found


def recorded(seen: Path) -> tuple[list[list[str]], list[dict[str, object]]]:
    argvs = [p.read_text().splitlines() for p in sorted(seen.glob("argv-*"))]
    configs = [json.loads(p.read_text()) for p in sorted(seen.glob("config-*.json"))]
    return argvs, configs


def check(seen: Path, client: str) -> None:
    argvs, configs = recorded(seen)
    commands = {w for argv in argvs for w in argv if w in VERBS}
    assert {"create", "start", "delete"} <= commands, (client, argvs)
    assert configs, f"{client}: no config.json recorded"
    for config in configs:
        assert unknown_keys(config, wire.Spec) == [], (client, config.get("ociVersion"))


def test_the_recorder_finds_a_key_hostjob_lacks() -> None:
    """The check itself: a key of no model is found, nested ones too."""
    config = {"ociVersion": "1.3.0", "process": {"args": ["x"], "newThing": 1},
              "linux": {"resources": {"memory": {"limit": 1, "newLimit": 2}}},
              "mounts": [{"destination": "/x", "newOption": True}]}  # fmt: skip
    assert unknown_keys(config, wire.Spec) == [
        "process.newThing",
        "linux.resources.memory.newLimit",
        "mounts[0].newOption",
    ]


def test_what_ctr_sends(
    containerd: harness.Containerd, test_image: OCIImage, tmp_path: Path, compat_workdir: Path
) -> None:
    runtime, seen = recorder(tmp_path, compat_workdir)
    cid = containerd.new_id("sends")
    cp = containerd.ctr("run", "--rm", "--runc-binary", runtime.client_path, test_image.ref,
                        cid, "true", timeout=60)  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    check(seen, "containerd {}.{}".format(*harness.containerd_version()))


def test_what_podman_sends(
    podman: harness.Podman, test_image: OCIImage, tmp_path: Path, compat_workdir: Path
) -> None:
    runtime, seen = recorder(tmp_path, compat_workdir)
    name = podman.new_name("sends")
    cp = podman.podman("run", "--rm", "--name", name, test_image.ref, "true", runtime=runtime)
    assert cp.returncode == 0, cp.stderr
    check(seen, "podman {}.{} ({})".format(*harness.podman_version(), podman.cgroup_manager))
