"""Backends that fail: one line naming what answered or why, exit 1 and a recorded failure;
a bad ``server.url`` is bad input (exit 2, nothing written).

The servers that are not vLLM are stdlib HTTP servers on loopback; the others are real
vLLM engines and servers on the tiny random pair.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_reaper import all_gone

from harness import results

pytestmark = pytest.mark.engine_processes  # what becomes of an engine's processes

SHORT = ["limit=2", "max_tokens=8", "calibrate=false", "warmup=0", "pairing=sequential"]


def _harness(*args: str) -> subprocess.Popen:
    """``python -m harness args`` in its own session."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _error_line(proc: subprocess.Popen, code: int) -> str:
    """The one ``error:`` line of a finished harness that exited with ``code``."""
    _, err = proc.communicate(timeout=600)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert proc.returncode == code and len(lines) == 1, err[-3000:]
    assert "Error executing job" not in err, err[-3000:]  # no traceback of the harness's
    return lines[0]


def _failure(results_dir: Path) -> str:
    """The error of the one failed job recorded under ``results_dir``."""
    (failure,) = [json.loads(x) for x in (results_dir / "tiny" / results.FAILURES).open()]
    return failure["error"]


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass


@contextlib.contextmanager
def _static_server(folder: Path) -> Iterator[str]:
    """A stdlib HTTP server of ``folder`` on loopback (GET only: a POST answers 501)."""
    handler = functools.partial(_Files, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
        httpd.shutdown()


@pytest.mark.slow  # a job through vLLM's imports
@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("[]", "{url}/v1/models served [] instead of a vLLM model list"),
        (
            '{"data": [{"id": "m"}]}',
            "{url}/v1/completions answered HTTP 501 Unsupported method ('POST'): a text/html page",
        ),
    ],
)
def test_a_server_that_is_not_vllm_is_one_line_naming_what_answered(
    tiny_overrides, tmp_path, models, message
):
    (tmp_path / "site" / "v1").mkdir(parents=True)
    (tmp_path / "site" / "v1" / "models").write_text(models)
    with _static_server(tmp_path / "site") as url:
        proc = _harness(*tiny_overrides, *SHORT, "variant=cot", "backend=server",
                        f"server.url={url}")  # fmt: skip
        line = _error_line(proc, 1)
    assert message.format(url=url) in line and "<" not in line, line
    assert message.format(url=url) in _failure(tmp_path / "results")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://", "names no host"),
        ("http://127.0.0.1:99999", "its port must be in 1-65535"),
        ("http://127.0.0.1:0", "its port must be in 1-65535"),
    ],
)
def test_a_malformed_server_url_is_bad_input_echoed_as_given(tmp_path, url, why):
    proc = _harness("variant=cot", "backend=server", f"server.url={url}", f"results_dir={tmp_path}")
    assert _error_line(proc, 2).startswith(f"error: server.url={url}: {why}")
    assert list(tmp_path.rglob("*")) == []


def test_weights_whose_safetensors_header_does_not_read_are_bad_input(tiny_pair, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(tiny_pair[0], target)
    (target / "model.safetensors").write_bytes(b"\xff" * 4096)  # a header "longer" than the file
    proc = _harness(f"models.targets.cot={target}", f"results_dir={tmp_path / 'results'}",
                    "variant=cot", *SHORT)  # fmt: skip
    assert _error_line(proc, 2) == (
        f"error: models.targets.cot={target}: model.safetensors is not a safetensors file "
        f"(its header claims {2**64 - 1} bytes, the file has 4096)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("multiprocessing", ["true", "false"])
def test_an_engine_that_fails_to_start_is_one_line_naming_vllms_root_cause(
    tiny_pair, tmp_path, multiprocessing
):
    target = tmp_path / "target"
    shutil.copytree(tiny_pair[0], target)
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a valid header
    proc = _harness(f"models.targets.cot={target}", f"results_dir={tmp_path / 'results'}",
                    "variant=cot", f"engine.multiprocessing={multiprocessing}", *SHORT)  # fmt: skip
    line = _error_line(proc, 1)
    cause = "SafetensorError: Error while deserializing header: incomplete metadata"
    assert line.startswith(f"error: vLLM could not start an engine of {target}: ") and cause in line
    assert cause in _failure(tmp_path / "results")


@pytest.mark.slow
def test_a_server_killed_mid_job_is_reported_killed_by_sigkill_not_by_a_warning(
    tiny_overrides, tmp_path
):
    proc = _harness(*tiny_overrides, *SHORT, "variant=cot", "backend=server", "limit=3",
                    "max_tokens=16", "request_rate=0.5")  # fmt: skip
    logs = tmp_path / "results" / "tiny" / results.SERVER_LOGS
    deadline = time.monotonic() + 300
    while "POST /v1/completions" not in "".join(p.read_text() for p in logs.glob("*.log")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    (api,) = [p for p in psutil.Process(proc.pid).children(recursive=True)
              if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())]  # fmt: skip
    (log,) = logs.glob("*.log")  # a warning as vLLM logs one (the issue's, from a low ulimit)
    with log.open("a") as out:
        out.write(f"(APIServer pid={api.pid}) WARNING 11-27 09:09:39 [system_utils.py:256] "
                  "Found ulimit of 20000 and failed to automatically increase\n")  # fmt: skip
    api.kill()
    line = _error_line(proc, 1)
    assert "the vLLM server died (exit code -9): killed by signal 9 (SIGKILL)" in line, line
    assert "WARNING" not in line and "ulimit" not in line
    assert "killed by signal 9 (SIGKILL)" in _failure(tmp_path / "results")


# an interleaved job's two engines, started one after the other
PAIR = """
import sys
from harness.backends import engine
from harness.config import compose_config
from harness.sweep.runner import prepare
engine.get_all(prepare(compose_config(sys.argv[1:])).specs)
"""


@pytest.mark.slow
def test_a_harness_sigkilled_while_its_second_engine_starts_leaves_no_engine_traceback(
    tiny_overrides,
):
    pair = [*tiny_overrides, "variant=cot_sd", "spec.k=1", "pairing=interleaved"]
    proc = subprocess.Popen([sys.executable, "-c", PAIR, *pair], stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while _engine_cores(proc.pid) < 2:  # the first engine is up, the second is starting
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.0)
    tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)  # until the last engine process lets go of stderr
    assert all_gone(tree, 30) == []
    assert "Traceback" not in err, err[-3000:]


def _engine_cores(pid: int) -> int:
    """How many of vLLM's EngineCore processes are among ``pid``'s descendants."""
    found = 0
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found += "EngineCore" in " ".join(child.cmdline())
    return found


def test_a_ctrl_c_while_a_server_jobs_event_loop_is_built_prints_no_traceback():
    # the Ctrl-C lands inside the loop's constructor (its selector is made there); Python's
    # own handler, as from a terminal (a test worker's children inherit SIGINT ignored)
    script = """
import selectors, os, signal, gc
from harness.backends import server
signal.signal(signal.SIGINT, signal.default_int_handler)
made = selectors.DefaultSelector
def interrupted():
    os.kill(os.getpid(), signal.SIGINT)
    return made()
selectors.DefaultSelector = interrupted
try:
    server._run(None)
except KeyboardInterrupt:
    print("interrupted")
gc.collect()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "interrupted"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
