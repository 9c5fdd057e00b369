"""``linux.seccomp``: a profile checked and compiled to a BPF program by the host's
libseccomp, installed by the container process (``bpf``), and compiled programs kept
between creates (``cache``). Loaded only when a config has a profile."""
