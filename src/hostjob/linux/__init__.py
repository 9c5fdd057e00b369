"""hostjob's bindings to the system: the system calls the standard library lacks
(``syscalls``, the one ctypes module), signals and pidfds (``signals``), locks
(``flock``), file changes and removal inside trees someone else can write, made
fd-relative (``fsutil``, ``fsremove``), and the mount table (``mountinfo``)."""
