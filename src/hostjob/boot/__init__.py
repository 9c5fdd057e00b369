"""What makes a command start fast: the code pack every command imports from
(``codepack``, made by ``codepack_build``), and the runtime path's stand-ins for the
standard library's heavier modules -- path names without ``os.path`` (``paths``), the
environment without ``os.environ`` (``env``), JSON on the C accelerator alone
(``jsonio``). The rules of the runtime path these serve are in ``docs/DEVELOPING.md``
("The runtime path is lean"), pinned by ``tests/integration/test_runtime_imports.py``."""
