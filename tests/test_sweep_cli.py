"""`python -m harness -m` end to end: kill mid-sweep, resume, skip, the results it writes,
and the submitit launcher (grouped by engine spec) against the basic one.

Real vLLM on CPU with the tiny random pair: a 2-dataset x 2-K multirun (cot at k=0,
cot_sd at k=1; cot_sd at k=0 and cot at k=1 are dropped by the sweeper). The basic
launcher's sweep (killed, then resumed) is run once and serves both checks. The SLURM
code path runs through ``hydra/launcher=submitit_local`` (same launcher class hierarchy,
local processes instead of sbatch).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness import metrics, results
from harness.calibration import record, timing

pytestmark = pytest.mark.slow

GRID = ["variant=cot,cot_sd", "spec.k=0,1", "dataset=synth_easy,synth_medium"]
JOBS = [
    "cot-synth_easy-k0-c1-s0-t0-n3",
    "cot-synth_medium-k0-c1-s0-t0-n3",
    "cot_sd-synth_easy-k1-c1-s0-t0-n3",
    "cot_sd-synth_medium-k1-c1-s0-t0-n3",
]
COMPARED = ["problem_id", "output_hash", "correct", "output_tokens", "num_accepted_tokens"]


def _command(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness", "-m", *GRID, *overrides]


def _kill_when(proc: subprocess.Popen, marker: str) -> str:
    """Read stderr until ``marker`` shows up, then SIGKILL the process; returns what was read."""
    seen: list[str] = []

    def read() -> None:
        while chunk := os.read(proc.stderr.fileno(), 4096):
            seen.append(chunk.decode(errors="replace"))
            if marker in "".join(seen[-2:]):
                proc.send_signal(signal.SIGKILL)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait(timeout=300)
    reader.join(timeout=5)
    return "".join(seen)


def _complete_jobs(sweep) -> list[str]:
    return sorted(p.name for p in sweep.iterdir() if results.read_summary(p) is not None)


def _table(sweep_dir: Path) -> pd.DataFrame:
    frames = [
        pd.read_parquet(job / results.REQUESTS).assign(job=job.name)
        for job in sorted(sweep_dir.iterdir())
        if results.read_summary(job) is not None
    ]
    return pd.concat(frames).sort_values(["job", "problem_id"])[["job", *COMPARED]]


@pytest.fixture(scope="module")
def basic(tiny_pair, tmp_path_factory) -> SimpleNamespace:
    """The grid under the basic launcher: killed while its first speculative job generates
    (its progress line is up), then resumed by the same command."""
    target, draft = tiny_pair
    root = tmp_path_factory.mktemp("basic")
    common = [f"models.targets.cot={target}", f"models.drafts.cot={draft}", "limit=3",
              "max_tokens=24"]  # fmt: skip
    overrides = [*common, f"results_dir={root / 'results'}"]
    sweep = root / "results" / "tiny"
    proc = subprocess.Popen(_command(overrides), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = _kill_when(proc, f"{JOBS[2]}:")
    visible = sorted(p.name for p in sweep.iterdir() if not p.name.startswith("."))
    killed = SimpleNamespace(returncode=proc.returncode, stderr=stderr, visible=visible,
                             complete=_complete_jobs(sweep))  # fmt: skip
    resumed = subprocess.run(_command(overrides), capture_output=True, text=True, timeout=600)
    return SimpleNamespace(common=common, overrides=overrides, sweep=sweep, killed=killed,
                           resumed=resumed)  # fmt: skip


def test_killed_sweep_leaves_no_partial_job_then_resumes_and_skips(basic):
    sweep, killed, resumed = basic.sweep, basic.killed, basic.resumed
    # 1. killed while the first speculative job generated
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    visible = killed.visible
    assert visible == killed.complete  # every job directory there is complete
    assert JOBS[:2] == visible[:2] and len(visible) < 4

    # 2. resume: the finished jobs are skipped, the rest run with one engine launch
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "dropped 2 with spec.k>0 for a variant without a draft and 2 k=0 runs" in resumed.stdout
    assert _complete_jobs(sweep) == JOBS
    for name in visible:
        assert f"skip {name}" in resumed.stdout, [
            x for x in resumed.stdout.splitlines() if name in x
        ]
    summaries = {n: json.loads((sweep / n / results.SUMMARY).read_text()) for n in JOBS}
    # interleaved: K = 0 runs beside a second instance of its engine (the A/A check), K = 1
    # beside the target's plain engine; each process started two engines
    assert summaries[JOBS[0]]["engine_launches"] == summaries[JOBS[1]]["engine_launches"] == 2
    assert summaries[JOBS[1]]["engine_reused"] and summaries[JOBS[3]]["engine_reused"]
    assert summaries[JOBS[3]]["engine_launches"] == 2  # the resumed process: K = 1 + plain
    assert {s["pairing"] for s in summaries.values()} == {"interleaved"}
    assert not (sweep / results.FAILURES).exists()
    # written to a pipe, not a terminal (harness.console): whole progress lines, no vLLM INFO
    log = resumed.stdout + resumed.stderr
    lines = [line.lstrip("\r") for line in resumed.stderr.splitlines()]
    assert any(line.startswith(f"{JOBS[3]}: 3/3 req [") for line in lines), lines
    assert max(len(line) for line in log.splitlines()) < 500
    assert not re.search(r"\bINFO \d\d-\d\d ", log), log[-3000:]
    # each engine calibrated itself once, before its first job's requests: the killed job's
    # engine had, so the resumed sweep measured nothing again
    assert not [line for line in resumed.stdout.splitlines() if line.startswith("calibration ")]
    records = [json.loads(p.read_text()) for p in (sweep / record.CALIBRATION).glob("*.json")]
    assert sorted(r["k"] for r in records) == [0, 1]
    draft = next(o.split("=", 1)[1] for o in basic.common if o.startswith("models.drafts"))
    for rec in records:
        (measured,) = rec["measurements"].values()
        # a speculative engine's window: rounds beside its plain engine (one request each)
        rounds = timing.PAIRED_ROUNDS if rec["k"] else timing.REQUESTS_PER_SLOT
        assert measured["requests"] == rounds
        assert measured["units"] > 0 and measured["per_unit_s"] > 0
        assert rec["draft"] == (None if rec["k"] == 0 else draft)

    # its last line: where the time went, summed over the runs this process wrote
    assert f"where the time went: {len(JOBS) - len(visible)} runs in " in resumed.stdout
    for name in JOBS:
        phases = summaries[name]["phases_s"]
        assert min(phases[p] for p in ("requests", "sentinel", "warm_up")) > 0, (name, phases)
    starts = [summaries[n]["phases_s"]["start"] for n in (JOBS[0], JOBS[2])]
    assert min(starts) > 1  # each the first job of its engines
    assert summaries[JOBS[0]]["phases_s"]["calibration"] > 0  # its engine's first job

    # 3. re-run: every job is skipped and nothing is rewritten
    stamps = {n: (sweep / n / results.SUMMARY).stat().st_mtime_ns for n in JOBS}
    tic = time.perf_counter()
    again = subprocess.run(_command(basic.overrides), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0
    assert [
        line.split()[1].rstrip(":")
        for line in again.stdout.splitlines()
        if line.startswith("skip ")
    ] == JOBS
    assert stamps == {n: (sweep / n / results.SUMMARY).stat().st_mtime_ns for n in JOBS}
    assert time.perf_counter() - tic < 60  # no engine started
    assert "where the time went" not in again.stdout

    # 4. what the jobs wrote
    hashes = {}
    for name, summary in summaries.items():
        rows = pq.read_table(sweep / name / results.REQUESTS)
        assert rows.column_names == results.request_schema().names and rows.num_rows == 3
        ids, out = rows["problem_id"].to_pylist(), rows["output_hash"].to_pylist()
        hashes[name] = dict(zip(ids, out, strict=True))
        assert (sweep / name / ".hydra" / "config.yaml").is_file()
        for row in rows.to_pylist():
            assert row["output_tokens"] == len(row["output_token_ids"]) > 0
            assert row["output_hash"] == metrics.output_hash(row["output_token_ids"])
            if summary["k"] == 0:
                assert row["num_draft_tokens"] is None and row["rejection_tokens"] is None
            else:
                assert 0 <= row["num_accepted_tokens"] <= row["num_draft_tokens"]
                assert 0.0 <= row["acceptance_rate"] <= 1.0
        if summary["k"] == 0:
            assert summary["spec"] is None
        else:
            assert len(summary["spec"]["accepted_per_pos"]) == 1
            assert summary["counter_mismatch"] is None
    assert hashes[JOBS[2]] == hashes[JOBS[0]]  # greedy speculation == plain decoding
    assert hashes[JOBS[3]] == hashes[JOBS[1]]


def test_submitit_local_matches_basic_launcher_and_resumes(basic, tmp_path):
    assert basic.resumed.returncode == 0, basic.resumed.stderr[-3000:]
    grouped_args = [*basic.common, f"results_dir={tmp_path}", "hydra/launcher=submitit_local",
                    "calibrate=false", "pairing=sequential"]  # fmt: skip
    grouped = subprocess.run(_command(grouped_args), capture_output=True, text=True, timeout=900)
    assert grouped.returncode == 0, grouped.stderr[-3000:]

    # 4 jobs over 2 engine specs (target alone, target + draft at K=1): 2 tasks
    assert "launcher: 4 jobs in 2 tasks (one per engine spec)" in grouped.stdout
    jobs = tmp_path / "tiny"
    launches = {
        job.name: results.read_summary(job)["engine_launches"]
        for job in jobs.iterdir()
        if results.read_summary(job) is not None
    }
    assert sorted(launches.values()) == [1, 1, 1, 1]  # each task started one engine

    # greedy decoding: the same tables whichever launcher (and pairing) ran the jobs
    pd.testing.assert_frame_equal(
        _table(basic.sweep).reset_index(drop=True), _table(jobs).reset_index(drop=True)
    )

    # a worker killed mid-job leaves no complete summary: resubmission re-runs only it
    lost = jobs / "cot_sd-synth_medium-k1-c1-s0-t0-n3"
    (lost / results.SUMMARY).unlink()
    kept = {p: p.stat().st_mtime_ns for p in jobs.glob(f"*/{results.SUMMARY}")}
    again = subprocess.run(_command(grouped_args), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert results.read_summary(lost) is not None
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # finished jobs were skipped


def test_a_job_whose_engine_crashes_is_recorded_and_the_sweep_goes_on(tiny_pair, tmp_path):
    target, _ = tiny_pair
    broken = shutil.copytree(target, tmp_path / "broken_target")
    weights = broken / "model.safetensors"  # its header reads; its tensors are cut off
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    sweep = tmp_path / "results" / "tiny"
    command = [
        sys.executable,
        "-m",
        "harness",
        "-m",
        "variant=cot,base",
        "spec.k=0",
        "dataset=synth_easy",
    ]
    command += [f"models.targets.cot={broken}", f"models.targets.base={target}"]
    command += [f"results_dir={tmp_path / 'results'}", "limit=2", "max_tokens=8"]
    command += ["pairing=sequential"]  # one engine for the base job, not an A/A pair
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "1 of 2 jobs failed; see failures.jsonl" in run.stderr
    failures = [json.loads(line) for line in (sweep / results.FAILURES).read_text().splitlines()]
    assert [f["job"] for f in failures] == ["cot-synth_easy-k0-c1-s0-t0-n2"]
    assert _complete_jobs(sweep) == ["base-synth_easy-k0-c1-s0-t0-n2"]
    assert sorted(p.name for p in sweep.iterdir()) == [
        record.CALIBRATION,  # the base job's engine calibrated itself
        ".hydra",
        results.LOCK,  # the sweep's lock file stays; the kernel released the lock
        "base-synth_easy-k0-c1-s0-t0-n2",
        "failures.jsonl",
    ]
