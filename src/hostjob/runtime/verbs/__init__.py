"""The runtime verbs with work of their own, one a module: create, delete, exec, run,
restart, events, ps."""
