"""One job end to end: prepare, skip if done (the one rule, :func:`check`), engine, run,
summarise, save.

Compute (``runner``, which also reads the engine's counters around the job's requests:
the engine is reused across the jobs of a multirun), summarise (here) and save
(``results``) stay separate; this module only wires them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import backends, metrics, provenance, results, tracking
from harness.backends import live
from harness.backends.base import Generator
from harness.calibration import timing
from harness.checks import unwritable
from harness.config import ConfigError
from harness.data.datasets import DatasetError
from harness.files import key_digest
from harness.records import RequestRecord, RunSummary
from harness.sweep import calibrate
from harness.sweep.runner import PreparedJob, prepare, run, warm_up

# What happened to a job (the Hydra task function's return value).
RAN, SKIPPED, FAILED = "ran", "skipped", "failed"


def models_used(cfg: Any, job: PreparedJob) -> dict[str, dict[str, Any]]:
    """The identity of each model the job loads, by its config key."""
    names = {f"models.targets.{cfg.variant.target}": job.spec.target}
    if job.spec.draft is not None:
        names[f"models.drafts.{cfg.variant.draft}"] = job.spec.draft
    return {key: provenance.model_identity(name) for key, name in names.items()}


def problems_digest(job: PreparedJob) -> str:
    """Digest of the problems actually sent: ids and prompt token ids."""
    return key_digest([[r.problem.id, list(r.prompt_token_ids)] for r in job.requests])


def run_key(cfg: Any, job: PreparedJob, models: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Everything that determines a job's results, by part: a stored run is reused only
    when every part is equal, and a re-run names the parts that changed."""
    versions = provenance.versions()
    # a plain side laid out like a family's engine apart (earlier runs had it in this process)
    apart = (
        job.baseline is not None and job.spec.apart_by_family() and job.baseline.multiprocessing()
    )
    return {
        "config": results.config_hash(cfg),
        **{f"model {key}": identity["digest"] for key, identity in models.items()},
        "problems": problems_digest(job),
        "system prompt": key_digest(cfg.prompts[cfg.variant.prompt_style]),
        "draftbench": str(versions["draftbench"]),
        "vllm": str(versions["vllm"]),
        **({"plain side": "in processes of its own, as the job's engine"} if apart else {}),
    }


def summarize(
    cfg: Any,
    job: PreparedJob,
    outcome: Outcome,
    models: dict[str, dict[str, Any]],
    key: dict[str, str],
) -> RunSummary:
    """The run summary of a finished job: its own facts only (no other job is read)."""
    records, wall_s, engine_counts = outcome.records, outcome.wall_s, outcome.counts
    tokens = sum(r.output_tokens for r in records)
    mismatch = None
    if job.info.k > 0:
        counted = (r.spec_counts for r in outcome.counted if r.spec_counts)
        mismatch = (
            metrics.counter_mismatch(metrics.total_counts(counted), engine_counts)
            if engine_counts
            else "engine reported no spec_decode counters"
        )
    started = outcome.started
    return RunSummary(
        job=job.info,
        config=results.resolved_config(cfg),
        config_hash=results.config_hash(cfg),
        versions=provenance.versions(),
        hardware=provenance.hardware(cfg.engine.device),
        engine_start_s=0.0 if started.reused else started.start_s,
        engine_reused=started.reused,
        engine_launches=started.launches,
        wall_s=wall_s,
        num_requests=len(records),
        output_tokens=tokens,
        output_tokens_per_s=metrics.tokens_per_s(tokens, wall_s),
        spec=engine_counts if job.info.k > 0 else None,
        counter_mismatch=mismatch,
        spec_requests=len(outcome.counted) if job.info.k > 0 and engine_counts else None,
        run_key=key,
        models=models,
        dataset_digest=key_digest([asdict(r.problem) for r in job.requests]),
        git=provenance.git_state(),
        command=provenance.command(),
        request_throughput=len(records) / wall_s if wall_s > 0 else None,
        reference=outcome.reference,
        phases_s=outcome.phases_s,
    )


@dataclass(frozen=True)
class Started:
    """How a job got its engines or servers: seconds to start its own (0 when reused), whether
    it was reused, and the backends of its kind (engines or servers) this process has started
    so far."""

    start_s: float
    reused: bool
    launches: int


class Reference:
    """The drift sentinel of one job: a fixed calibration request timed on one engine or
    server at the job's start and end, on its baseline when interleaved (the plain target,
    the same across the target's jobs), else on its own: an engine stepped in this process
    by :func:`harness.calibration.timing.reference`, a server by
    :func:`~harness.calibration.timing.served_reference`."""

    def __init__(self, job: PreparedJob, on: Generator, llm: Any | None, requests: int):
        from harness.checks import load_tokenizer

        self.k = 0 if job.baseline is not None else job.info.k
        self.engine = "baseline" if job.baseline is not None else "job"
        tokenizer = load_tokenizer(job.spec.target)
        if llm is not None:
            self._time = lambda: timing.reference(llm, tokenizer, self.k, requests)
        else:
            self._time = lambda: timing.served_reference(on, tokenizer, self.k, requests)
        self.start_s = self._time()
        self.end_s: float | None = None

    def end(self) -> None:
        """Time the reference again, after the job's requests."""
        self.end_s = self._time()

    def to_row(self) -> dict[str, Any]:
        """The summary's ``reference``: engine, k, start_s and end_s (seconds per unit)."""
        return {"engine": self.engine, "k": self.k, "start_s": self.start_s, "end_s": self.end_s}


@contextmanager
def timed(phases_s: dict[str, float], phase: str) -> Iterator[None]:
    """Add the seconds the block takes to ``phases_s[phase]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        phases_s[phase] = phases_s.get(phase, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class Outcome:
    """What one engine instance (a pair when interleaved) measured, or a job's instances
    together (:func:`combine`): records in problem order, seconds generating, the job
    engine's counters and the records they cover, how it got its engines, the sentinel, and
    the seconds spent in each phase (:data:`PHASES`)."""

    records: list[RequestRecord]
    wall_s: float
    counts: metrics.SpecCounts | None
    counted: list[RequestRecord]
    started: Started
    reference: dict[str, Any] | None = None
    phases_s: dict[str, float] = field(default_factory=dict)


# A job's phases and what the sweep's last line calls them: the measured requests, its
# engines or servers started (0 when reused), the in-job calibration, the drift sentinel at
# both ends, and the warm-up.
PHASES = {
    "requests": "requests",
    "start": "engine start-ups",
    "calibration": "calibration",
    "sentinel": "sentinel",
    "warm_up": "warm-up",
}


def split(job: PreparedJob, n: int) -> list[PreparedJob]:
    """The job over ``n`` engine instances: problem i goes to instance i mod n."""
    return [replace(job, requests=job.requests[i::n]) for i in range(n)]


def _reference(rows: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The instances' sentinels as one: their mean start and mean end (each instance timed
    on its own engine at both, so their differences cancel and the machine's drift stays)."""
    if not rows or rows[0] is None:
        return None
    mean = {key: sum(r[key] for r in rows) / len(rows) for key in ("start_s", "end_s")}
    return {**rows[0], **mean}


def combine(job: PreparedJob, parts: list[Outcome]) -> Outcome:
    """The outcomes of :func:`split`'s parts as one: records tagged with their instance, in
    the job's problem order; seconds, job engine start-up and counters summed (the counters
    over the instances that kept theirs); the sentinels' mean start and end."""
    tagged = [replace(r, instance=i) for i, part in enumerate(parts) for r in part.records]
    order = {r.problem.id: i for i, r in enumerate(job.requests)}
    kept = [p for p in parts if p.counts is not None]
    start_s = sum(p.started.start_s for p in parts if not p.started.reused)
    return Outcome(
        records=sorted(tagged, key=lambda r: order[r.problem_id]),
        wall_s=sum(p.wall_s for p in parts),
        counts=metrics.total_counts(p.counts for p in kept) if kept else None,
        counted=[r for p in kept for r in p.counted],
        started=Started(start_s, all(p.started.reused for p in parts), parts[-1].started.launches),
        reference=_reference([p.reference for p in parts]),
        phases_s={k: sum(p.phases_s.get(k, 0.0) for p in parts) for k in PHASES},
    )


def _instance(cfg: Any, job: PreparedJob, progress: bool, index: int) -> Outcome:
    """Instance ``index`` of the job (``job`` is its part) on its backend's live engines or
    servers (its own, and its baseline when interleaved), watched by the drift sentinel; an
    engine stepped in this process is calibrated at the first instance. On any error every
    live backend stops."""
    backend = backends.of(cfg)
    logs = results.sweep_dir(cfg) / results.SERVER_LOGS
    phases_s = dict.fromkeys(PHASES, 0.0)
    with timed(phases_s, "start"):
        got = backend.instance(cfg, job.specs, index, logs)
    (own, reused), baseline = got[0], (got[1][0] if len(got) > 1 else None)
    llm = backend.in_process(own)
    plain = None if baseline is None else backend.in_process(baseline)
    try:
        with timed(phases_s, "warm_up"):
            for generator in (own, baseline)[: len(got)]:
                warm_up(job, generator)
        if llm is not None and cfg.calibrate and index == 0:
            with timed(phases_s, "calibration"):
                calibrate.on_live_engine(cfg, job.spec, llm, plain)
        watched = own if baseline is None else baseline
        with timed(phases_s, "sentinel"):
            sentinel = Reference(job, watched, backend.in_process(watched), cfg.sentinel_requests)
        with timed(phases_s, "requests"):
            records, wall_s, counts = run(job, own, progress, baseline)
        with timed(phases_s, "sentinel"):
            sentinel.end()
    except BaseException:
        live.clear()
        raise
    # an engine started after the job's reset its counters (vLLM keeps one set per process)
    restarted = any(not r for _, r in got[1:]) and (reused or index % 2 == 1)
    lost = backend.shares_counters and restarted
    started = Started(own.start_s, reused, backend.launches())
    counts = None if lost else counts
    return Outcome(records, wall_s, counts, records, started, sentinel.to_row(), phases_s)


def measure(cfg: Any, job: PreparedJob, progress: bool = True) -> Outcome:
    """The job on its engines, or on ``cfg.instances`` > 1 fresh engine instances (pairs when
    interleaved, none kept from the job before) with its problems split over them
    (:func:`split`), combined (:func:`combine`)."""
    parts = split(job, cfg.instances)
    if len(parts) > 1:
        print(f"{job.info.run_id}: {len(parts)} engine instances, the problems split over them")
    return combine(job, [_instance(cfg, part, progress, i) for i, part in enumerate(parts)])


@dataclass(frozen=True)
class Checked:
    """A run past its pre-check (:func:`check`): the prepared job, its models' identities, its
    run key, and what changed since its stored run: ``[]`` when it is done and still valid,
    the parts of the run key that differ, None when no complete run is stored (or ``force``)."""

    job: PreparedJob
    models: dict[str, dict[str, Any]]
    key: dict[str, str]
    changed: list[str] | None


def check(cfg: Any) -> Checked:
    """The pre-check of one run (:func:`harness.sweep.runner.prepare`) and the one rule for
    "done": a complete stored run with the same run key (:func:`run_key`: config hash,
    models' identities, problems, ...). Asked by the job and, before the first job, by the
    sweeper (:func:`check_sweep`).

    Raises:
        ConfigError, DatasetError: bad input.
    """
    job = prepare(cfg)
    models = models_used(cfg, job)
    key = run_key(cfg, job, models)
    job_dir = results.sweep_dir(cfg) / results.job_name(cfg)
    changed = None if cfg.force else results.changed_parts(job_dir, key)
    return Checked(job, models, key, changed)


def check_sweep(cfgs: Sequence[Any]) -> str | None:
    """:func:`check` every run of a sweep's jobs (each repeat) before the first one starts, so
    bad input is found before any engine, whatever changed since a run was stored; one line
    on the runs that are done and still valid, None when none is.

    Raises:
        ConfigError, DatasetError: bad input, naming the value.
    """
    runs = [c for cfg in cfgs for c in repeat_configs(cfg)]
    done = sum(check(c).changed == [] for c in runs)
    if not done:
        return None
    return f"sweep: {done} of {len(runs)} runs are done and still valid (same run key): skipped"


def run_job(cfg: Any, hydra_dir: Path | None = None, progress: bool = True) -> RunSummary | None:
    """Run one composed job config and save its results; None when skipped as done
    (:func:`check`).

    Raises:
        ConfigError, DatasetError: bad input, before any engine starts.
        Exception: whatever the engine raised; the live engine is shut down first.
    """
    name = results.job_name(cfg)
    job_dir = results.sweep_dir(cfg) / name
    checked = check(cfg)
    job, changed = checked.job, checked.changed
    if changed == []:
        print(f"skip {name}: complete results with the same run key exist")
        return None
    if changed:
        print(f"re-running {name}: {', '.join(changed)} changed")
    elif changed is None and not cfg.force and (job_dir / results.SUMMARY).exists():
        print(f"re-running {name}: its stored results are incomplete or do not read back")
    outcome = measure(cfg, job, progress)
    summary = summarize(cfg, job, outcome, checked.models, checked.key)
    try:
        results.write_job(job_dir, outcome.records, summary, hydra_dir)
    except OSError as exc:
        raise OSError(f"could not write the results to {job_dir} ({exc})") from None
    print(summary.headline())
    tracking.log_run(cfg, summary, outcome.records)
    return summary


def repeat_configs(cfg: Any) -> list[Any]:
    """One config per repeat of ``cfg``: seeds seed, seed + 1, ... as repeats 0, 1, ..."""
    from omegaconf import OmegaConf

    return [OmegaConf.merge(cfg, {"seed": cfg.seed + r, "repeat": r}) for r in range(cfg.repeats)]


def time_spent(cfgs: Sequence[Any], wall_s: float, since: float) -> str | None:
    """One line on where a sweep's ``wall_s`` seconds went: each phase summed over the runs of
    ``cfgs`` (each repeat) written at ``since`` (a Unix time) or later, the rest being
    pre-checks, results and Hydra; None when no run was written."""
    runs = []
    for repeat in (r for cfg in cfgs for r in repeat_configs(cfg)):
        job_dir = results.sweep_dir(repeat) / results.job_name(repeat)
        summary = results.read_summary(job_dir)
        fresh = summary is not None and (job_dir / results.SUMMARY).stat().st_mtime >= since
        if fresh and summary.get("phases_s"):
            runs.append(summary["phases_s"])
    if not runs:
        return None
    spent = {name: sum(r.get(key, 0.0) for r in runs) for key, name in PHASES.items()}
    parts = [f"{name} {s:.0f} s ({s / wall_s:.0%})" for name, s in spent.items()]
    rest = wall_s - sum(spent.values())
    return (
        f"where the time went: {len(runs)} runs in {wall_s:.0f} s: {', '.join(parts)}, "
        f"the rest {rest:.0f} s ({rest / wall_s:.0%}: pre-checks, results, Hydra)"
    )


def run_or_record_failure(
    cfg: Any, hydra_dir: Path | None = None, keep_going: bool = False, progress: bool = True
) -> str:
    """Every repeat of ``cfg`` (:func:`repeat_configs`) through :func:`run_one`: ``FAILED``
    when one failed, else ``RAN`` when one ran, else ``SKIPPED``."""
    statuses = [run_one(c, hydra_dir, keep_going, progress) for c in repeat_configs(cfg)]
    return next((s for s in (FAILED, RAN) if s in statuses), SKIPPED)


def run_one(
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
        if unwritable(exc):  # nor would failures.jsonl or the next job's results be written
            raise
        name = results.job_name(cfg)
        pointer = "; see failures.jsonl"
        try:
            results.append_failure(results.sweep_dir(cfg), name, results.config_hash(cfg), exc)
        except OSError as lost:
            pointer = ""  # the line above says why it is not there
            print(
                f"job {name}: could not record its failure in "
                f"{results.sweep_dir(cfg) / results.FAILURES} ({lost})",
                file=sys.stderr,
            )
        if not keep_going:
            raise
        print(f"job {name} failed ({type(exc).__name__}: {exc}){pointer}", file=sys.stderr)
        return FAILED
