"""`python -m harness -m` end to end: kill mid-sweep, resume, skip, and the results it writes.

Real vLLM on CPU with the tiny random pair: a 2-dataset x 2-K multirun (cot at k=0,
cot_sd at k=1; cot_sd at k=0 and cot at k=1 are dropped by the sweeper).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from harness import calibrate, metrics, results

pytestmark = pytest.mark.slow

GRID = ["variant=cot,cot_sd", "spec.k=0,1", "dataset=synth_easy,synth_medium"]
JOBS = [
    "cot-synth_easy-k0-c1-s0-t0-n3",
    "cot-synth_medium-k0-c1-s0-t0-n3",
    "cot_sd-synth_easy-k1-c1-s0-t0-n3",
    "cot_sd-synth_medium-k1-c1-s0-t0-n3",
]


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


def test_killed_sweep_leaves_no_partial_job_then_resumes_and_skips(tiny_overrides, tmp_path):
    sweep = tmp_path / "results" / "tiny"
    # 1. kill while the first speculative job generates (its progress bar is up)
    proc = subprocess.Popen(
        _command(tiny_overrides), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stderr = _kill_when(proc, f"{JOBS[2]}:")
    assert proc.returncode == -signal.SIGKILL, stderr[-2000:]
    visible = sorted(p.name for p in sweep.iterdir() if not p.name.startswith("."))
    assert visible == _complete_jobs(sweep)  # every job directory there is complete
    assert JOBS[:2] == visible[:2] and len(visible) < 4

    # 2. resume: the finished jobs are skipped, the rest run with one engine launch
    resumed = subprocess.run(_command(tiny_overrides), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "dropped 2 with spec.k>0 for a variant without a draft and 2 k=0 runs" in resumed.stdout
    assert _complete_jobs(sweep) == JOBS
    for name in visible:
        assert f"skip {name}" in resumed.stdout, [
            x for x in resumed.stdout.splitlines() if name in x
        ]
    summaries = {n: json.loads((sweep / n / results.SUMMARY).read_text()) for n in JOBS}
    assert summaries[JOBS[0]]["engine_launches"] == summaries[JOBS[1]]["engine_launches"] == 1
    assert summaries[JOBS[1]]["engine_reused"] and summaries[JOBS[3]]["engine_reused"]
    assert summaries[JOBS[3]]["engine_launches"] == 1  # the resumed process started one engine
    assert not (sweep / results.FAILURES).exists()
    # each engine calibrated itself once, before its first job's requests: the killed job's
    # engine had, so the resumed sweep measured nothing again
    assert "calibration " not in resumed.stdout
    records = [json.loads(p.read_text()) for p in (sweep / calibrate.CALIBRATION).glob("*.json")]
    assert sorted(r["k"] for r in records) == [0, 1]
    draft = next(o.split("=", 1)[1] for o in tiny_overrides if o.startswith("models.drafts"))
    for record in records:
        (measured,) = record["measurements"].values()
        assert measured["requests"] == calibrate.REQUESTS_PER_SLOT
        assert measured["units"] > 0 and measured["per_unit_s"] > 0
        assert record["draft"] == (None if record["k"] == 0 else draft)

    # 3. re-run: every job is skipped and nothing is rewritten
    stamps = {n: (sweep / n / results.SUMMARY).stat().st_mtime_ns for n in JOBS}
    tic = time.perf_counter()
    again = subprocess.run(_command(tiny_overrides), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0
    assert [
        line.split()[1].rstrip(":")
        for line in again.stdout.splitlines()
        if line.startswith("skip ")
    ] == JOBS
    assert stamps == {n: (sweep / n / results.SUMMARY).stat().st_mtime_ns for n in JOBS}
    assert time.perf_counter() - tic < 60  # no engine started

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


def test_a_job_whose_engine_crashes_is_recorded_and_the_sweep_goes_on(tiny_pair, tmp_path):
    target, _ = tiny_pair
    broken = shutil.copytree(target, tmp_path / "broken_target")
    (broken / "model.safetensors").write_bytes(b"not a checkpoint")
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
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "1 of 2 jobs failed; see failures.jsonl" in run.stderr
    failures = [json.loads(line) for line in (sweep / results.FAILURES).read_text().splitlines()]
    assert [f["job"] for f in failures] == ["cot-synth_easy-k0-c1-s0-t0-n2"]
    assert _complete_jobs(sweep) == ["base-synth_easy-k0-c1-s0-t0-n2"]
    assert sorted(p.name for p in sweep.iterdir()) == [
        calibrate.CALIBRATION,  # the base job's engine calibrated itself
        ".hydra",
        results.LOCK,  # the sweep's lock file stays; the kernel released the lock
        "base-synth_easy-k0-c1-s0-t0-n2",
        "failures.jsonl",
    ]
