"""Local sweep processes die with the coordinator, however it dies.

:func:`die_with_parent` arranges that the calling process ends when its parent does: on Linux
the kernel sends it SIGKILL (``prctl(PR_SET_PDEATHSIG)``, nothing to run in Python, so it works
while the process computes), elsewhere a daemon thread polls the parent pid once a second.

A local pool's workers fork from a fork server that the coordinator starts (see
:class:`archsim.sweep.runner._ProcessExecutor`); both need it, because a SIGKILL of the
coordinator runs no clean-up and the pool's own pipes stay open in every worker (each holds
both ends of its call queue), so nothing else would ever tell them:

* the fork server imports this module at its start (it is in the server's preload list), which
  calls :func:`die_with_parent` for the server: it dies with the coordinator;
* every worker calls it from the pool's initializer: it dies with the fork server.

Importing this module anywhere else does nothing (the call is made only inside the fork server
process, recognised by its command line).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time


def die_with_parent() -> None:
    """End this process when its parent exits (at once if the parent is already gone)."""
    parent = os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0   # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="archsim-parent-watch", daemon=True).start()
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def _in_fork_server() -> bool:
    """True in a ``multiprocessing`` fork server (``python -c 'from multiprocessing.forkserver
    import main; ...'``), where this module is preloaded."""
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver import main" in \
        " ".join(getattr(sys, "orig_argv", ()))


if _in_fork_server():
    die_with_parent()

__all__ = ["die_with_parent"]
