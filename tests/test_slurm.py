"""The submitit SLURM launcher on a real one-node SLURM cluster (``scripts/slurm-local``):
array tasks through sbatch, the launcher's knobs, a cancelled task resumed, a failed job
recorded. Run by ``make test-slurm`` (root: it installs and starts slurm-wlm)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import results

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-local"
GRID = ["-m", "variant=cot_sd", "dataset=synth_easy,synth_medium", "spec.k=1,2",
        "pairing=sequential", "calibrate=false", "limit=3", "max_tokens=24", "warmup=0"]  # fmt: skip
KNOBS = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=local",
         "hydra.launcher.timeout_min=30", "hydra.launcher.array_parallelism=1",
         "hydra.launcher.cpus_per_task=2", "hydra.launcher.mem_gb=4",
         "hydra.launcher.setup=['export DRAFTBENCH_TASK_SETUP=ran']"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A one-node cluster for this module; its environment for sbatch and squeue."""
    env = {**os.environ, "SLURM_LOCAL_DIR": str(tmp_path_factory.mktemp("slurm"))}
    try:
        start = subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True)
        assert start.returncode == 0, start.stdout + start.stderr
        env["SLURM_CONF"] = f"{env['SLURM_LOCAL_DIR']}/slurm.conf"
        yield env
    finally:  # a half-started cluster's daemons are stopped too
        subprocess.run([SCRIPT, "stop"], env=env, capture_output=True, text=True)


def _sweep(cluster, tiny_pair, results_dir: Path, target: Path | None = None, slurm=True,
           extra: tuple[str, ...] = ()):  # fmt: skip
    """The 4-job sweep (2 engine specs), through SLURM unless ``slurm`` is False."""
    draft = tiny_pair[1]
    command = [sys.executable, "-m", "harness", *GRID, f"models.targets.cot={target or tiny_pair[0]}",
               f"models.drafts.cot={draft}", f"results_dir={results_dir}",
               *(KNOBS if slurm else []), *extra]  # fmt: skip
    return subprocess.Popen(command, env=cluster, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def _finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=1200)
    return process.returncode, out, err


def _rows(sweep: Path) -> dict[str, list[tuple]]:
    """Per job: its run key and each request's output hash and acceptance counts."""
    found = {}
    for job in sorted(p for p in sweep.iterdir() if (p / results.SUMMARY).is_file()):
        table = pq.read_table(job / results.REQUESTS).to_pylist()
        key = results.read_summary(job)["run_key"]
        found[job.name] = [key] + [
            (r["problem_id"], r["output_hash"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in table
        ]
    return found


def _slurm_processes(job_id: str) -> list[int]:
    """Live processes whose environment names SLURM job ``job_id`` (an array's tasks too)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        names = {f"SLURM_JOB_ID={job_id}".encode(), f"SLURM_ARRAY_JOB_ID={job_id}".encode()}
        if names & set(environ):
            found.append(int(proc.name))
    return found


def test_a_sweep_through_sbatch_array_tasks_equals_the_local_sweep(cluster, tiny_pair, tmp_path):
    local = _finish(_sweep(cluster, tiny_pair, tmp_path / "local", slurm=False))
    assert local[0] == 0, local[2][-3000:]
    code, out, err = _finish(_sweep(cluster, tiny_pair, tmp_path / "slurm"))
    assert code == 0, err[-3000:]
    assert "launcher: 4 jobs in 2 tasks (one per engine spec)" in out
    # the same run keys, outputs and acceptance as the local sweep
    assert _rows(tmp_path / "slurm" / "tiny") == _rows(tmp_path / "local" / "tiny") != {}
    # what sbatch was given: one array of two tasks, one at a time, and every knob
    (script,) = (tmp_path / "slurm").rglob("*_submission.sh")
    text = script.read_text()
    for flag in ("--array=0-1%1", "--partition=local", "--time=30", "--cpus-per-task=2",
                 "--mem=4GB", "--gpus-per-node=0"):  # fmt: skip
        assert f"#SBATCH {flag}\n" in text, flag
    assert "export DRAFTBENCH_TASK_SETUP=ran" in text
    logs = list((tmp_path / "slurm").rglob("*_log.out"))
    assert len(logs) == 2  # each array task ran and logged under its own SLURM job id


def test_a_cancelled_task_leaves_no_engine_and_the_same_command_resumes_it(
    cluster, tiny_pair, tmp_path
):
    # engines in processes of their own, vLLM's default: a task still starts its engine when
    # cancelled (an in-process engine starts in seconds and the task could finish first),
    # and the processes checked for below exist
    own = ("engine.multiprocessing=true",)
    run = _sweep(cluster, tiny_pair, tmp_path, extra=own)
    sweep = tmp_path / "tiny"
    try:
        running, deadline = None, time.monotonic() + 900
        while running is None:  # one task has its result, the other runs
            assert time.monotonic() < deadline, "the array's second task never ran"
            time.sleep(1)
            done = {p.name.removesuffix("_0_result.pkl") for p in tmp_path.rglob("*_result.pkl")}
            queue = subprocess.run(["squeue", "-h", "-o", "%i %t"], env=cluster, text=True,
                                   capture_output=True).stdout.split()  # fmt: skip
            live = [j for j, s in zip(queue[::2], queue[1::2], strict=True) if s == "R"]
            running = next((j for j in live if j not in done), None) if done else None
        finished = {p: p.stat().st_mtime_ns for p in sweep.glob(f"*/{results.SUMMARY}")}
        time.sleep(3)  # the task is starting its engine
        subprocess.run(["scancel", running], env=cluster, check=True)
        code, _, err = _finish(run)
    finally:
        if run.poll() is None:
            run.kill()
    assert code == 1
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "did not finish" in lines[0] and running in lines[0], err[-3000:]
    job_id = running.split("_")[0]
    for _ in range(30):
        if not _slurm_processes(job_id):
            break
        time.sleep(1)
    assert _slurm_processes(job_id) == []  # no engine, worker or reaper left on the node

    again = _finish(_sweep(cluster, tiny_pair, tmp_path, extra=own))
    assert again[0] == 0, again[2][-3000:]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # kept, not re-run
    assert len(list(sweep.glob(f"*/{results.SUMMARY}"))) == 4


def test_a_job_whose_engine_crashes_in_a_task_is_one_line_and_one_failure_entry(
    cluster, tiny_pair, tmp_path
):
    target, _ = tiny_pair
    broken = shutil.copytree(target, tmp_path / "broken")
    weights = broken / "model.safetensors"  # its header reads; its tensors are cut off
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code, _, err = _finish(_sweep(cluster, tiny_pair, tmp_path / "results", broken))
    assert code == 1
    assert "4 of 4 jobs failed; see failures.jsonl" in err.splitlines()
    failures = (tmp_path / "results" / "tiny" / results.FAILURES).read_text().splitlines()
    assert len(failures) == 4 and all("cot_sd-synth_" in line for line in failures)
