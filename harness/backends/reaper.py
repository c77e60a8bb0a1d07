"""A watchdog that kills an engine's processes when the process that started them dies.

vLLM on CPU starts its EngineCore and workers with fork+exec, so they outlive a SIGKILLed
parent. :func:`tag` puts a fresh token in the environment before an engine starts;
:func:`watch` starts ``python -m harness.backends.reaper <parent> <token> <pid>:<start>...``
in its own session, which records the parent's new descendants every :data:`POLL_S` and,
once the parent is gone, SIGTERMs then SIGKILLs them (matched by start time) and every
process with the token. :func:`stop` ends it on a normal shutdown.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable

import psutil

POLL_S = 0.5
GRACE_S = 3.0
# set by the harness before it starts an engine (its processes inherit them)
OWN_GROUP_ENV = "DRAFTBENCH_ENGINE_OWN_GROUP"
ENGINE_ENV = "DRAFTBENCH_ENGINE_TOKEN"


def own_process_group() -> None:
    """vLLM general plugin (``pyproject.toml``), run in every vLLM process: an engine
    process the harness started moves to its own process group, so a terminal's Ctrl-C
    reaches only the harness, which then shuts its engine down (no engine tracebacks)."""
    import multiprocessing

    if os.environ.get(OWN_GROUP_ENV) == "1" and multiprocessing.parent_process() is not None:
        with contextlib.suppress(OSError):  # already a group or session leader
            os.setpgid(0, 0)


def descendants(pid: int | None = None) -> set[tuple[int, float]]:
    """(pid, create time) of every live descendant of ``pid`` (default: this process)."""
    found = set()
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                found.add((child.pid, child.create_time()))
    return found


def session(sid: int) -> set[tuple[int, float]]:
    """(pid, create time) of the live processes in session ``sid``: what a process started
    with ``start_new_session=True`` started, also after it died."""
    found = set()
    for proc in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(OSError):
            if os.getsid(proc.info["pid"]) == sid:
                found.add((proc.info["pid"], proc.info["create_time"]))
    return found


def tag() -> str:
    """A fresh token in this process's environment (:data:`ENGINE_ENV`): the processes it
    starts from now on carry it."""
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    os.environ[ENGINE_ENV] = token
    return token


def tagged(token: str) -> set[tuple[int, float]]:
    """(pid, create time) of the live processes, other than this one, started with ``token``."""
    found = set()
    for proc in psutil.process_iter(["pid", "create_time", "environ"]):
        environ = proc.info["environ"] or {}
        if environ.get(ENGINE_ENV) == token and proc.info["pid"] != os.getpid():
            found.add((proc.info["pid"], proc.info["create_time"]))
    return found


def watch(token: str, known: Iterable[tuple[int, float]]) -> subprocess.Popen:
    """Start the watchdog of this process's processes other than ``known`` ((pid, create
    time) pairs), and of those started with ``token`` (:func:`tag`)."""
    args = [f"{pid}:{start!r}" for pid, start in sorted(known)]
    command = [sys.executable, "-m", "harness.backends.reaper", str(os.getpid()), token, *args]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(watchdog: subprocess.Popen) -> None:
    """End a watchdog (its processes were shut down normally)."""
    watchdog.terminate()
    watchdog.wait()


def alive(processes: Iterable[tuple[int, float]]) -> list[psutil.Process]:
    """The processes still alive with their recorded create time (not a reused pid)."""
    found = []
    for pid, start in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            if proc.create_time() == start:
                found.append(proc)
    return found


def reap(processes: Iterable[tuple[int, float]], grace_s: float = GRACE_S) -> None:
    """SIGTERM the processes still alive with their recorded create time and their
    descendants, then SIGKILL."""
    targets: dict[int, psutil.Process] = {}
    for proc in alive(processes):
        with contextlib.suppress(psutil.NoSuchProcess):
            targets |= {p.pid: p for p in (proc, *proc.children(recursive=True))}
    for proc in targets.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.resume()  # a stopped process (a paused server) holds SIGTERM until continued
            proc.terminate()
    _, survivors = psutil.wait_procs(targets.values(), timeout=grace_s)
    for proc in survivors:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(survivors, timeout=grace_s)  # SIGKILL is not instant under load


def main(argv: list[str]) -> None:
    """``<parent pid> <token> <pid>:<create time>...``: record the parent's new descendants
    until it is gone, then reap them and the token's processes."""
    parent, token = int(argv[0]), argv[1]
    known = {(int(pid), float(start)) for pid, start in (x.split(":") for x in argv[2:])}
    recorded: set[tuple[int, float]] = set()
    while os.getppid() == parent:
        recorded |= descendants(parent) - known
        time.sleep(POLL_S)
    me = psutil.Process()
    reap((recorded | tagged(token)) - {(me.pid, me.create_time())})


if __name__ == "__main__":
    main(sys.argv[1:])
