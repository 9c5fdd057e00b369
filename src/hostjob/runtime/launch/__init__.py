"""Starting a container process: the launch plan, the fork, the child's set-up, hooks,
the terminal."""
