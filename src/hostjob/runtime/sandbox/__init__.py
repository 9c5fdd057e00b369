"""A container's filesystem on the host: host mode, bind mode, the undo log."""
