"""The server backend on a real vLLM server (CPU, the tiny random pair, loopback only):
streamed records, open-loop arrivals, a server reached by URL, and its faults (a server
that will not start, a killed or interrupted harness)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
from test_cli_faults import _wait_for, start_harness
from test_reaper import all_gone

from harness import results
from harness.backends import arrivals, live, server
from harness.backends.engine import EngineSpec
from harness.config import compose_config
from harness.sweep.job import run_job

pytestmark = pytest.mark.slow


def _rows(cfg) -> list[dict]:
    path = results.sweep_dir(cfg) / results.job_name(cfg) / results.REQUESTS
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def overrides(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    out = tmp_path_factory.mktemp("server_results")
    live.clear()
    yield [
        f"models.targets.cot={target}",
        f"models.drafts.cot={draft}",
        f"results_dir={out}",
        "variant=cot_sd",
        "spec.k=2",
        "limit=4",
        "max_tokens=24",
        "calibrate=false",
        "pairing=sequential",
    ]
    live.clear()


def test_a_server_job_streams_the_offline_engines_tokens_and_acceptance(overrides):
    offline = compose_config(overrides)
    run_job(offline, progress=False)
    served = compose_config([*overrides, "backend=server", "concurrency=2"])
    summary = run_job(served, progress=False)
    assert summary.job.backend == "server"
    assert summary.engine_launches == live.launches(server.SERVER) == 1
    # the server's Prometheus counters over the job equal the sum of its requests' metrics
    assert summary.counter_mismatch is None and summary.spec.num_steps > 0
    by_problem = {r["problem_id"]: r for r in _rows(offline)}
    rows = _rows(served)
    assert len(rows) == 4
    for row in rows:
        twin = by_problem[row["problem_id"]]
        assert row["output_hash"] == twin["output_hash"]  # greedy: the same tokens
        assert row["acceptance_histogram"] == twin["acceptance_histogram"]
        # a chunk carries a verify step's tokens, or several steps' when the server merges
        # them under load: at most one gap per step, and the gaps span the decode
        assert 1 <= len(row["itl_s"]) <= row["num_spec_steps"]
        assert sum(row["itl_s"]) == pytest.approx(row["e2e_s"] - row["ttft_s"], abs=1e-6)
        assert row["sent_s"] >= 0
    # the same spec reuses the server; a second job's name says its backend and rate
    rated = compose_config([*overrides, "backend=server", "concurrency=4", "request_rate=inf"])
    again = run_job(rated, progress=False)
    assert again.engine_reused and live.launches(server.SERVER) == 1
    assert results.job_name(rated).endswith("-c4-server-rpsinf-s0-t0-n4")
    assert {r["output_hash"] for r in _rows(rated)} == {r["output_hash"] for r in rows}
    assert run_job(rated, progress=False) is None  # complete: skipped on a re-run


def test_an_interleaved_server_job_pairs_each_request_with_the_plain_targets_server(overrides):
    launches = live.launches(server.SERVER)
    cfg = compose_config([*overrides, "backend=server", "pairing=interleaved", "concurrency=2",
                          "seed=2"])  # fmt: skip
    summary = run_job(cfg, progress=False)
    # the plain target's server starts beside the job's (the job's own may be live already)
    assert live.launches(server.SERVER) - launches == (1 if summary.engine_reused else 2)
    assert summary.job.pairing == "interleaved" and summary.counter_mismatch is None
    # the drift sentinel times the fixed request on the plain target's server at both ends
    assert summary.reference["engine"] == "baseline" and summary.reference["k"] == 0
    assert summary.reference["start_s"] > 0 and summary.reference["end_s"] > 0
    rows = _rows(cfg)
    assert [r["pair_output_hash"] for r in rows] == [r["output_hash"] for r in rows]
    # (on two loaded cores a whole answer can arrive in one burst: e2e = TTFT, TPOT 0)
    assert all(r["pair_e2e_s"] >= r["pair_ttft_s"] > 0 for r in rows)
    # open loop pairs too: windows of pair_window requests, the same arrivals on both sides
    rated = compose_config([*overrides, "backend=server", "pairing=interleaved",
                            "request_rate=8", "concurrency=2", "pair_window=3"])  # fmt: skip
    summary = run_job(rated, progress=False)
    assert summary.job.pairing == "interleaved" and summary.engine_reused
    rows = _rows(rated)
    assert [r["pair_output_hash"] for r in rows] == [r["output_hash"] for r in rows]
    # each window's arrivals start afresh: problem 3 opens the second window (0.125 s at 8/s)
    sent = [r["sent_s"] for r in rows]
    assert sent[0] < sent[1] < sent[2] and sent[3] < sent[2]


def _decode_seconds(url: str) -> float:
    """The server's summed decode seconds of finished requests (its Prometheus histogram)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        families = text_string_to_metric_families(response.read().decode())
    return sum(
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == "vllm:request_decode_time_seconds_sum"
    )


def test_a_paused_server_spends_nothing_answers_once_resumed_and_stops(overrides, tmp_path):
    """A side of a pair out of its window is paused: every process of its session stopped.
    Resumed, it answers, and the answer's decode interval is the engine's own (the one its
    metrics count), not the client's."""
    from vllm import SamplingParams  # here: the file's import would slow every collection

    cfg = compose_config([*overrides, "backend=server"])
    theirs = server.start(EngineSpec.from_config(cfg), tmp_path / "paused.log", 600)
    try:
        processes = [psutil.Process(pid) for pid, _ in server.reaper.session(theirs.process.pid)]
        assert len(processes) >= 3  # the API server, the engine core, the worker
        theirs.pause()
        assert {p.status() for p in processes} == {psutil.STATUS_STOPPED}
        before = sum(sum(p.cpu_times()[:2]) for p in processes)
        time.sleep(1.0)
        assert sum(sum(p.cpu_times()[:2]) for p in processes) == before
        theirs.resume()
        assert psutil.STATUS_STOPPED not in {p.status() for p in processes}
        answered = []
        decoded = _decode_seconds(theirs.url)
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        theirs.generate([[5, 6, 7]], params, arrivals.Load(1), lambda i, c: answered.append(c))
        assert len(answered[0].token_ids) == 4
        # the metrics are recorded as the answer goes out: wait for them to count it
        deadline = time.monotonic() + 10
        while (
            engine := _decode_seconds(theirs.url) - decoded
        ) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine > 0 and answered[0].decode_s == pytest.approx(engine, abs=1e-6)
        theirs.pause()
    finally:
        server.stop(theirs)  # paused: it is continued, then stopped
    assert all_gone([p.pid for p in processes], 30) == []


def test_an_offline_job_after_a_server_job_leaves_no_server(overrides):
    """Jobs of one multirun switching backend in one process: the offline job asks the live
    cache for its engine, which stops the server the job before it ran on."""
    served = run_job(compose_config([*overrides, "backend=server", "seed=3"]), progress=False)
    servers = _api_servers()
    assert served.job.backend == "server" and len(servers) == 1
    launches = live.launches(server.SERVER)
    offline = run_job(compose_config([*overrides, "seed=3"]), progress=False)
    assert offline.job.backend == "offline" and not offline.engine_reused
    assert _api_servers() == [] and all_gone(servers, 30) == []
    assert live.launches(server.SERVER) == launches  # launches are counted per kind
    live.clear()  # the tests below start harnesses of their own


def _api_servers() -> list[int]:
    """The pids of the vLLM servers among this process's descendants."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "vllm.entrypoints.openai.api_server" in " ".join(proc.cmdline()):
                found.append(proc.pid)
    return found


def test_a_running_server_is_reached_by_url_without_starting_another(overrides):
    """Runs after the tests that share the harness's live servers (a job given server.url
    stops them)."""
    spec_job = compose_config([*overrides, "backend=server"])
    log = results.sweep_dir(spec_job) / results.SERVER_LOGS / "by-url.log"
    theirs = server.start(EngineSpec.from_config(spec_job), log, 600)  # not the harness's
    launches = live.launches(server.SERVER)
    try:
        cfg = compose_config([*overrides, "backend=server", f"server.url={theirs.url}/", "seed=1"])
        summary = run_job(cfg, progress=False)
    finally:
        server.stop(theirs)
    assert live.launches(server.SERVER) == launches and summary.num_requests == 4
    assert summary.counter_mismatch is None


def test_open_loop_send_times_follow_the_rate_and_burstiness():
    steady = arrivals.send_times(400, arrivals.Load(8, 4.0, burstiness=1.0, seed=3))
    assert steady[-1] == pytest.approx(100.0)  # n / rate, as vllm bench serve scales them
    assert np.all(np.diff(steady) >= 0) and steady[0] > 0
    gaps = np.diff(steady)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.15)  # Poisson: CV 1
    bursty = np.diff(arrivals.send_times(400, arrivals.Load(8, 4.0, burstiness=0.25, seed=3)))
    assert np.std(bursty) / np.mean(bursty) > 1.6  # Gamma(0.25): CV 2
    same = arrivals.send_times(400, arrivals.Load(8, 4.0, burstiness=1.0, seed=3))
    assert np.array_equal(steady, same)
    assert not arrivals.send_times(5, arrivals.Load(2, float("inf"))).any()
    assert not arrivals.send_times(5, arrivals.Load(2)).any()


def test_a_server_that_will_not_start_is_one_line_and_a_recorded_failure(overrides, tmp_path):
    args = [*overrides, f"results_dir={tmp_path}", "backend=server", "engine.dtype=float7"]
    proc = start_harness(args)
    _, err = proc.communicate(timeout=300)
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in err.decode(), err.decode()[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: the vLLM server exited with code ")
    assert "float7" in lines[0] and f"(log: {tmp_path / 'tiny' / '.servers'}" in lines[0]
    (failure,) = [json.loads(x) for x in (tmp_path / "tiny" / results.FAILURES).open()]
    assert failure["job"].startswith("cot_sd-synth_easy-k2-c1-server-") and "float7" in str(failure)


def test_a_dead_server_is_reported_with_its_own_log_lines_not_an_earlier_servers(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("RuntimeError: what an earlier server of this spec died of\n")
    with log.open("a") as out:
        start = out.tell()
        dead = subprocess.Popen(
            [sys.executable, "-c", "print('shutting down'); exit(3)"], stdout=out
        )
    dead.wait()
    gone = server.Server(None, "http://127.0.0.1:9", "m", process=dead, log=log, log_start=start)
    message = str(gone._failure(OSError("connection refused")))
    assert message.startswith("the vLLM server died (exit code 3): shutting down"), message
    assert "earlier server" not in message


def test_a_killed_harness_leaves_no_server(overrides, tmp_path):
    """(A Ctrl-C's SIGINT, interrupting a server job: the end of the test below.)"""
    args = [*overrides, f"results_dir={tmp_path}", "backend=server", "limit=40",
            "max_tokens=200", "request_rate=1"]  # fmt: skip
    proc = start_harness(args)
    _wait_for_log(proc, tmp_path / "tiny" / results.SERVER_LOGS, "Application startup complete")
    tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= 3  # the watchdog, the server and its engine
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert all_gone(tree, 30) == [], err.decode()[-3000:]


def test_a_server_that_dies_mid_job_fails_that_job_and_the_next_starts_another(overrides, tmp_path):
    """Then a Ctrl-C (SIGINT) in the job after those leaves no server either (one harness and
    its second server serve both checks)."""
    # a job of 20 answers (killed while it runs), then one of 3 on a server of its own, then
    # one of 40 on that server, interrupted
    args = ["-m", *overrides, f"results_dir={tmp_path}", "backend=server", "limit=20,3,40",
            "max_tokens=200", "request_rate=1", "dataset=synth_easy"]  # fmt: skip
    proc = start_harness(args)
    log = tmp_path / "tiny" / results.SERVER_LOGS
    _wait_for_log(proc, log, "POST /v1/completions")  # requests under way
    tree = psutil.Process(proc.pid).children(recursive=True)
    (api,) = [p for p in tree if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())]
    api.kill()
    text = _wait_for(proc, "stderr", "cot_sd-synth_easy-k2-c1-server-rps1-s0-t0-n40:")
    assert "Traceback" not in text and "the vLLM server died (exit code -9)" in text, text[-3000:]
    (failure,) = [json.loads(x) for x in (tmp_path / "tiny" / results.FAILURES).open()]
    assert failure["job"] == "cot_sd-synth_easy-k2-c1-server-rps1-s0-t0-n20"
    # the dead server's engine is reaped (while the harness runs on); the next job starts a
    # server of its own and runs
    assert all_gone([p.pid for p in tree], 30) == []
    (done,) = (tmp_path / "tiny").glob("cot_sd-*-s0-t0-n3")
    assert results.read_summary(done)["num_requests"] == 3
    assert _text(log).count("Application startup complete") == 2

    # Ctrl-C while the job of 40 runs on the second server
    tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= 3  # the watchdog, the server and its engine
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    text += err.decode(errors="replace")
    assert all_gone(tree, 30) == [], text[-3000:]
    assert proc.returncode == 130 and "Traceback" not in text, text[-3000:]
    assert "interrupted: job cot_sd-synth_easy-k2-c1-server-rps1-" in text


def _wait_for_log(proc, folder, marker: str, timeout: float = 300) -> None:
    """Wait until a server log in ``folder`` shows ``marker``, ``proc`` still running."""
    deadline = time.monotonic() + timeout
    while not (folder.is_dir() and marker in _text(folder)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)


def _text(folder) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.glob("*.log"))
