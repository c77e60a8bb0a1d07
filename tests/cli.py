"""``python -m <module> <args>`` for the command-line tests, in a process forked from a
server that has imported the heavy libraries once: a call costs tenths of a second instead
of the seconds a fresh interpreter spends importing hydra, pandas, matplotlib and torch.
The child is a real process (its own exit code, stdout, stderr, environment and working
directory), and everything the command imports beyond those libraries it imports itself."""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

# Libraries that read no environment at import (huggingface_hub, transformers and vLLM do,
# so each command imports them itself, with the environment it was given).
PRELOAD = ["torch", "scipy.stats", "harness.config", "harness.sweep.plan", "reports.report"]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def ctrl_c_reaches() -> None:
    """A ``preexec_fn`` giving the child SIGINT's default action: a shell's background job
    starts with SIGINT ignored, which Python would keep, and Ctrl-C would never reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(
    module: str,
    *args: str,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Run ``python -m module *args``; returns what :func:`subprocess.run` with
    ``capture_output=True, text=True`` would."""
    command = [sys.executable, "-m", module, *args]
    environ = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        out.touch()
        err.touch()
        where = str(cwd or os.getcwd())
        child = _context.Process(target=_main, args=(module, args, environ, where, out, err))
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(
            command, child.exitcode, out.read_text(), err.read_text()
        )


def _main(
    module: str, args: tuple[str, ...], env: dict[str, str], cwd: str, out: Path, err: Path
) -> None:
    """The child: the environment, directory and streams it was given, then the module as
    ``__main__``; exits as the interpreter would (a traceback is exit code 1)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        with open(path, "w") as stream:
            os.dup2(stream.fileno(), fd)
    sys.argv = [module, *args]
    sys.modules.pop(module, None)  # preloaded, it would run as __main__ beside its import
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
