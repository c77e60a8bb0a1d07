"""Calibration: the measured time of one target token and of one verify step per engine spec.

    python -m harness.sweep.calibrate                     # the experiment's sweep grid
    python -m harness.sweep.calibrate variant=cot_sd,cod_sd spec.k=0,1,3,5 concurrency=1,4
    python -m harness.sweep.calibrate ... force=true      # measure again even when cached

Takes the same overrides as ``python -m harness -m`` and plans the sweep the same way; it
starts only the engines no job calibrated (each draft model as a plain target, each
speculator with speculation off). What is measured: docs/METRICS.md, docs/COST_MODEL.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import backends, grid, provenance, speculators
from harness.calibration.record import (
    CALIBRATION,
    Entry,
    cache_key,
    identity,
    load,
    replace_stale,
    save,
)
from harness.calibration.timing import describe, measure, without_drafts
from harness.checks import command
from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.sweep.runner import PreparedJob


def speculation_off(entry: Entry) -> Entry:
    """A speculator's engine with speculation off: vLLM's per-batch-size schedule at K = 0
    for every batch size, the draft or head loaded; measured per token (K = 0)."""
    batch = dict(entry.spec.settings)["max_num_seqs"]
    return Entry(
        entry.target, entry.draft, 0, replace(entry.spec, k=1, k_schedule=((1, batch, 0),))
    )


def job_entry(cfg: Any, spec: Any = None) -> Entry:
    """The engine spec of a composed job config (``spec`` when given: the one the job
    runs), under the job's model names, laid out as its backend runs it
    (:meth:`Backend.timed`); a what-if spec as its speculator's own (a step costs the same
    whichever drafts are accepted)."""
    from harness.backends.engine import EngineSpec
    from harness.sweep.runner import speculator

    spec = spec or EngineSpec.from_config(cfg)
    spec = backends.of(cfg).timed(replace(spec, synthetic_acceptance_length=None))
    return Entry(cfg.models.targets[cfg.variant.target], speculator(cfg), spec.k, spec)


def levels(cfg: Any) -> set[int]:
    """The concurrencies a job's engine and its plain target are calibrated at: the job's;
    at an open-loop request rate, where the concurrency only caps the batch, also every
    power of two below it (the batch sizes load produces, which the report prices a
    server row's steps at)."""
    cap = int(cfg.concurrency)
    if cfg.request_rate is None:
        return {cap}
    return {2**i for i in range(cap.bit_length()) if 2**i < cap} | {cap}


def entries(cfgs: Iterable[Any]) -> dict[Entry, set[int]]:
    """Engine specs of the planned jobs (plus each speculative job's plain target, which
    prices the cost model's steps without drafts and c; each draft model as a plain
    target: a head cannot run alone; and each speculator that follows a K schedule at one K
    planned closed loop at two or more concurrencies with speculation off), each with the
    concurrencies its jobs run at (:func:`levels`)."""
    from harness.backends.engine import EngineSpec

    wanted: dict[Entry, set[int]] = {}
    off: dict[Entry, set[int]] = {}
    for cfg in cfgs:
        job = job_entry(cfg)
        wanted.setdefault(job, set()).update(levels(cfg))
        if job.k == 0:
            continue
        target = Entry(job.target, None, 0, backends.of(cfg).timed(EngineSpec.baseline(cfg)))
        wanted.setdefault(target, set()).update(levels(cfg))
        family = speculators.get(job.spec.method)
        if family.timed_as_target:
            plain = EngineSpec.plain(job.spec.draft, dict(job.spec.settings))
            wanted.setdefault(Entry(str(job.draft), None, 0, plain), set()).add(cfg.concurrency)
        if not job.spec.k_schedule and cfg.request_rate is None and family.follows_k_schedule:
            off.setdefault(speculation_off(job), set()).add(cfg.concurrency)
    found = wanted | {entry: levels for entry, levels in off.items() if len(levels) > 1}
    _one_spec_per_file(found)
    return found


def _one_spec_per_file(found: Iterable[Entry]) -> None:
    """Refuse two engine specs a sweep's calibration would file under one target, draft, K
    and K schedule (each file replaces the other's: ``record.replace_stale``).

    Raises:
        ConfigError: naming the entry and how its two specs differ.
    """
    seen: dict[tuple, Entry] = {}
    for entry in found:
        about = (entry.target, entry.draft, entry.k, entry.k_schedule)
        if (other := seen.setdefault(about, entry)) is not entry:
            a, b = dict(other.spec.settings), dict(entry.spec.settings)
            keys = sorted(a.keys() | b.keys())
            differ = ", ".join(
                f"engine.{k}={a.get(k)} / {b.get(k)}" for k in keys if a.get(k) != b.get(k)
            )
            raise ConfigError(
                f"calibration: this sweep runs {entry.target} draft={entry.draft} K={entry.k} "
                f"as two engines ({differ or 'their engine arguments'}; a server's are timed in "
                "processes of their own), and one calibration file holds one: run them as "
                "separate sweeps (sweep=<name>) or with calibrate=false"
            )


def calibrate(
    entry: Entry,
    concurrencies: Sequence[int],
    out_dir: Path,
    force: bool,
    llm: Any = None,
    baseline: Any = None,
    beside: Any = None,
) -> Path:
    """Measure ``entry`` at the concurrencies its cache file lacks, on ``llm`` when given
    (the entry's live engine), else on an engine started only then; returns the file.

    ``baseline`` (K > 0: the live plain engine of the entry's target) is measured in
    alternation with it (:func:`measure`), and a cached measurement without it is taken again;
    ``beside`` (K > 0, no ``llm``: the spec of that plain engine) starts it for that.
    """
    from harness.backends import live
    from harness.backends.engine import OFFLINE
    from harness.checks import load_tokenizer

    path = out_dir / f"{cache_key(entry)}.json"
    cached = None if force else load(path)
    done = {int(c): m for c, m in (cached or {}).get("measurements", {}).items()}
    paired = (baseline is not None or beside is not None) and entry.k > 0
    todo = [
        c
        for c in sorted(concurrencies)
        if c not in done or (paired and done[c].get("baseline_per_unit_s") is None)
    ]
    if not todo:
        return path
    if llm is None and paired and baseline is None:
        (own, _), (plain, _) = live.get_all(OFFLINE, (entry.spec.sharing(2), beside))
        llm, baseline = own.llm, plain.llm
    elif llm is None:
        llm = live.get(OFFLINE, entry.spec)[0].llm
    tokenizer = load_tokenizer(entry.spec.target)
    git = provenance.git_state()
    for concurrency in todo:
        k0 = entry.k > 0 and entry.spec.k_at(concurrency) == 0  # a schedule's K = 0 level
        paired_with = baseline if paired else None
        measured = measure(llm, tokenizer, 0 if k0 else entry.k, concurrency, baseline=paired_with)
        if k0:
            measured = without_drafts(measured)
        done[concurrency] = {**asdict(measured), "git": git}  # the commit it was measured at
        schedule = f" k_schedule={entry.k_schedule}" if entry.k_schedule else ""
        print(f"calibration {entry.target} draft={entry.draft} K={entry.k}{schedule} "
              f"concurrency={concurrency}: {describe(measured, entry.k)}")  # fmt: skip
    record = {
        "target": entry.target,
        "draft": entry.draft,
        "k": entry.k,
        "k_schedule": entry.k_schedule,
        "identity": identity(entry),
        "measurements": {str(c): done[c] for c in sorted(done)},
    }
    return replace_stale(save(path, record), record)


def on_live_engine(cfg: Any, spec: Any, llm: Any, baseline: Any = None) -> None:
    """Calibrate a job's engine ``spec``, live as ``llm``, at the job's concurrency unless
    measured (``baseline``: the live plain engine an interleaved job runs beside); a what-if
    engine is not its entry's, so ``python -m harness.sweep.calibrate`` times that one."""
    from harness.results import sweep_dir

    if spec.synthetic_acceptance_length is not None:
        return
    out = sweep_dir(cfg) / CALIBRATION
    calibrate(job_entry(cfg, spec), [cfg.concurrency], out, False, llm, baseline)


def planned_jobs(overrides: list[str]) -> list[tuple[Any, PreparedJob]]:
    """The composed configs of the jobs ``python -m harness -m <overrides>`` would run, each
    with its job as the harness prepares it before any engine starts (``runner.prepare``)."""
    from harness.config import check_group_overrides, check_overrides, compose_config
    from harness.sweep.runner import prepare
    from harness.sweep.sweeper import plan

    check_group_overrides(overrides)
    check_overrides(overrides)
    jobs = grid.multirun(overrides)
    composed = {tuple(job): compose_config(job) for job in jobs}
    planned = [composed[tuple(job)] for job in plan(list(composed.items())).jobs]
    return [(cfg, prepare(cfg)) for cfg in planned]


def run(overrides: list[str]) -> list[Path]:
    """Calibrate every engine spec of the planned sweep; returns the files written or reused.
    The speculative engine of an interleaved job is timed in alternation with its plain
    engine, as in the job, so its step cost and the plain target's come from one window."""
    from harness import results
    from harness.backends import live

    planned = planned_jobs(overrides)
    cfgs = [cfg for cfg, _ in planned]
    beside = {job_entry(cfg): backends.of(cfg).timed(job.baseline) for cfg, job in planned
              if cfg.spec.k > 0 and job.baseline is not None}  # fmt: skip
    sweep = results.sweep_dir(cfgs[0])
    results.lock_sweep(sweep)
    force = bool(cfgs[0].force)
    try:
        return [
            calibrate(entry, sorted(levels), sweep / CALIBRATION, force, beside=beside.get(entry))
            for entry, levels in entries(cfgs).items()
        ]
    finally:
        live.clear()  # before the interpreter exits: no "engine core exited" warning


@command(doc=__doc__)
def main(argv: list[str]) -> int:
    """Run the calibration; print the files. Returns the exit code (2: bad input)."""
    for path in run(argv):
        print(f"calibration: {path}")
    return 0


if __name__ == "__main__":
    from harness.config import cuda_visible, with_engine_override

    sys.exit(main(with_engine_override(sys.argv, cuda_visible())[1:]))
