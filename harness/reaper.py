"""A watchdog that kills an engine's processes when the process that started them dies.

vLLM on CPU starts its EngineCore and workers with fork+exec, so they outlive a
SIGKILLed parent. :func:`watch` starts ``python -m harness.reaper <parent> <pid>:<start>...``
in its own session (a terminal's Ctrl-C does not reach it); it polls every
:data:`POLL_S` whether its parent changed and then SIGTERMs, and after
:data:`GRACE_S` SIGKILLs, the recorded processes that still have their recorded start
time (a recycled pid is never touched). :func:`stop` ends it on a normal shutdown.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable

import psutil

POLL_S = 0.5
GRACE_S = 3.0
# set by the harness before it starts an engine (its processes inherit it)
OWN_GROUP_ENV = "DRAFTBENCH_ENGINE_OWN_GROUP"


def own_process_group() -> None:
    """vLLM general plugin (``pyproject.toml``), run in every vLLM process: an engine
    process the harness started moves to its own process group, so a terminal's Ctrl-C
    reaches only the harness, which then shuts its engine down (no engine tracebacks)."""
    import multiprocessing

    if os.environ.get(OWN_GROUP_ENV) == "1" and multiprocessing.parent_process() is not None:
        with contextlib.suppress(OSError):  # already a group or session leader
            os.setpgid(0, 0)


def descendants() -> set[tuple[int, float]]:
    """(pid, create time) of every live descendant of this process."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            found.add((child.pid, child.create_time()))
    return found


def watch(processes: Iterable[tuple[int, float]]) -> subprocess.Popen:
    """Start the watchdog for ``processes`` ((pid, create time) pairs) of this process."""
    args = [f"{pid}:{start!r}" for pid, start in sorted(processes)]
    command = [sys.executable, "-m", "harness.reaper", str(os.getpid()), *args]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(watchdog: subprocess.Popen) -> None:
    """End a watchdog (its processes were shut down normally)."""
    watchdog.terminate()
    watchdog.wait()


def reap(processes: Iterable[tuple[int, float]], grace_s: float = GRACE_S) -> None:
    """SIGTERM the processes still alive with their recorded create time, then SIGKILL."""
    alive = []
    for pid, start in processes:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == start:
                proc.terminate()
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    _, survivors = psutil.wait_procs(alive, timeout=grace_s)
    for proc in survivors:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(survivors, timeout=grace_s)  # SIGKILL is not instant under load


def main(argv: list[str]) -> None:
    """``<parent pid> <pid>:<create time>...``: wait for the parent to go, then reap."""
    parent = int(argv[0])
    processes = [(int(pid), float(start)) for pid, start in (x.split(":") for x in argv[1:])]
    while os.getppid() == parent:
        time.sleep(POLL_S)
    reap(processes)


if __name__ == "__main__":
    main(sys.argv[1:])
