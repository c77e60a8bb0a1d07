"""The engine watchdog: a SIGKILLed parent's processes die with it, recycled pids are spared.

Fast tests use ``sleep`` children (exec'd, and forked without exec); the ``slow`` ones
SIGKILL a process holding a real engine on the tiny pair, once it is ready and while
``LLM(...)`` is still building it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.backends import reaper

pytestmark = pytest.mark.engine_processes  # what becomes of an engine's processes


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def all_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for them to go."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _sleeper(*, ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    command = [sys.executable, "-c", code] if ignore_term else ["sleep", "60"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    if ignore_term:
        proc.stdout.readline()  # the handler is in place
    return proc


def _identity(proc: subprocess.Popen) -> tuple[int, float]:
    return proc.pid, psutil.Process(proc.pid).create_time()


def test_reap_kills_recorded_processes_and_spares_a_recycled_pid():
    killed, spared, stubborn = _sleeper(), _sleeper(), _sleeper(ignore_term=True)
    pid, start = _identity(spared)
    tic = time.monotonic()
    reaper.reap([_identity(killed), (pid, start - 1.0), _identity(stubborn)], grace_s=0.5)
    # reap() waits for (and so reaps) them; the one that ignores SIGTERM is killed after the grace
    assert not _alive(killed.pid) and not _alive(stubborn.pid)
    assert 0.5 <= time.monotonic() - tic < 5
    assert spared.poll() is None  # same pid, other start time: not the recorded process
    spared.kill()
    spared.wait()


PARENT = """
import os, subprocess, sys, time
from harness.backends import reaper
reaper.watch(reaper.tag(), reaper.descendants())
kids = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]  # exec'd: they carry the tag
if sys.argv[1:] == ["fork"]:  # forked without exec: no tag, recorded by the watchdog's polls
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids = [pid]
    time.sleep(4 * reaper.POLL_S)
print("pids:", *(k if isinstance(k, int) else k.pid for k in kids), flush=True)
time.sleep(60)
"""


def _kill_parent_and_list_survivors(code: str, *args: str, timeout: float) -> list[int]:
    """Start ``code`` (it prints ``pids: ...``, then waits), SIGKILL it; its processes alive after.

    Survivors are killed before returning, so a failing test leaves nothing behind.
    """
    command = [sys.executable, "-c", code, *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    line = b""
    while not line.startswith(b"pids:"):
        line = proc.stdout.readline()
        assert line, "the process ended before printing its pids"
    tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    pids = [int(x) for x in line.split()[1:]]
    assert pids and set(pids) <= set(tree), (line, tree)
    proc.kill()
    proc.wait()
    survivors = all_gone(tree, timeout)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    return survivors


@pytest.mark.parametrize("how", ["exec", "fork"])
def test_children_die_with_a_sigkilled_parent(how):
    assert _kill_parent_and_list_survivors(PARENT, how, timeout=10) == []


def test_stop_ends_the_watchdog_and_leaves_the_processes():
    watchdog = reaper.watch(reaper.tag(), reaper.descendants())
    child = _sleeper()
    reaper.stop(watchdog)
    assert watchdog.returncode == -signal.SIGTERM
    assert child.poll() is None
    child.kill()
    child.wait()


ENGINE = """
import sys, time
import psutil
from harness.backends import engine
from harness.config import compose_config
engine.get(engine.EngineSpec.from_config(compose_config(sys.argv[1:])))
print("pids:", *(p.pid for p in psutil.Process().children(recursive=True)), flush=True)
time.sleep(600)
"""
# the engines of an interleaved job: the job's own and its baseline, each with a watchdog
PAIR = """
import sys, time
import psutil
from harness.backends import engine
from harness.config import compose_config
from harness.sweep.runner import prepare
assert len(engine.get_all(prepare(compose_config(sys.argv[1:])).specs)) == 2
print("pids:", *(p.pid for p in psutil.Process().children(recursive=True)), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_both_engines_of_a_pair_die_with_a_sigkilled_harness(tiny_overrides):
    pair = [*tiny_overrides, "variant=cot_sd", "spec.k=1", "pairing=interleaved"]
    survivors = _kill_parent_and_list_survivors(PAIR, *pair, timeout=15)
    assert survivors == []


def engine_core_started(pid: int) -> bool:
    """Whether vLLM's EngineCore process is among ``pid``'s descendants."""
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "EngineCore" in " ".join(child.cmdline()):
                return True
    return False


@pytest.mark.slow
def test_engine_processes_die_with_a_harness_sigkilled_during_engine_start_up(tiny_overrides):
    command = [sys.executable, "-c", ENGINE, *tiny_overrides, "variant=cot"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while not engine_core_started(proc.pid):  # vLLM's engine process is up; LLM(...) still builds
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)
    tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    proc.kill()
    out, _ = proc.communicate()
    assert b"pids:" not in out  # killed before the engine was ready
    survivors = all_gone(tree, 15)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


def _group_after_plugin(queue) -> None:  # runs in a multiprocessing child
    reaper.own_process_group()
    queue.put(os.getpgid(0) == os.getpid())


@pytest.mark.parametrize("flag, own_group", [("1", True), ("", False)])
def test_engine_processes_leave_the_terminals_group_only_when_the_harness_asks(
    monkeypatch, flag, own_group
):
    import multiprocessing

    monkeypatch.setenv(reaper.OWN_GROUP_ENV, flag)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_group_after_plugin, args=(queue,))
    child.start()
    assert queue.get(timeout=60) is own_group
    child.join()
    group = os.getpgid(0)
    reaper.own_process_group()  # the harness's own process never leaves its group
    assert os.getpgid(0) == group
