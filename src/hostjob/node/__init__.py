"""The node installer: what a cluster's DaemonSet pod does to put hostjob on its node.

The installer image (built by ``scripts/installer-image`` with ``hostjob pack``) holds
one directory, ``/opt/hostjob``: a Python of its own (its interpreter runs through the
directory's own loader and libraries), the standard library, hostjob and the few
libraries it needs. ``hostjob node install`` run from that image, with the host's root
mounted, copies the directory onto the host, adds hostjob's runtime handlers to the
host's containerd through a drop-in file (``containerd``), restarts containerd through
the host's systemd and waits until its CRI serves the handlers (``cri``);
``hostjob node uninstall`` undoes each step; ``hostjob node serve`` does the one, waits
for the pod's termination, then does the other (``install``).
"""
