"""The runtime's verbs, one a module, each taking a ``Handle``: create, start, state,
kill, delete, exec (``execute``), pause and resume (``pause``), update, run, ps, events,
restart. A command loads its own verb's module and no other."""
