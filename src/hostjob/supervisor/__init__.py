"""The supervisor of detached image containers (``hostjob run -d IMAGE``), conmon's role
kept out of the runtime: the watcher (launch and loop), the restart policy, the CRI log
(writer, reader, ``logs``), ``stop``, and systemd units. Above the runtime, below images."""
