"""hostjob's OCI runtime: the container verbs, the state store, process launch, mounts, hooks."""
