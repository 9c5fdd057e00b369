"""Real clients (containerd, podman) driving OCI runtimes: see conftest.py and harness.py."""
