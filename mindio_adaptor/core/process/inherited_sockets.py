"""A forked child (a DataLoader worker) must not keep its parent's network connections open.

fork() copies every descriptor, so each worker of a training process holds its own reference to the
parent's gloo connections and to the processor's connection to the controller. When the parent dies,
those connections stay open until the workers notice and exit (PyTorch's watchdog: seconds), so the
peers and the controller do not see the death: collectives with the dead rank block instead of
failing at once, and the controller only notices through missed heartbeats. Closing the inherited
TCP descriptors right after fork makes a dead process's connections close with it. The child never
used them: its parent's threads, which own them, do not exist in it.
"""
from __future__ import annotations

import os

from mindio_adaptor.core.communication.comm_abort import tcp_connections

_installed = False


def close_in_child() -> int:
    """Close this (just forked) process's TCP descriptors; returns how many."""
    closed = 0
    for connection in tcp_connections():
        try:
            os.close(connection.fd)
            closed += 1
        except OSError:
            pass
    return closed


def install() -> None:
    """From now on, every child forked by this process closes the inherited TCP descriptors."""
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=close_in_child)
        _installed = True
