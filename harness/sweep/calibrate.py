"""Calibration: the measured time of one target token and of one verify step per engine spec.

    python -m harness.sweep.calibrate                     # the experiment's sweep grid
    python -m harness.sweep.calibrate variant=cot_sd,cod_sd spec.k=0,1,3,5 concurrency=1,4
    python -m harness.sweep.calibrate ... force=true      # measure again even when cached

Takes the same overrides as ``python -m harness -m`` and plans the sweep the same way; it
starts only the engines no job calibrated (each draft model as a plain target, each
speculator with speculation off). What is measured: docs/METRICS.md, docs/COST_MODEL.md.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import metrics, provenance, schedule, speculators
from harness.checks import command, looks_local
from harness.files import json_digest, write_text

if TYPE_CHECKING:
    from harness.sweep.runner import PreparedJob

CALIBRATION = ".calibration"  # <results_dir>/<sweep>/.calibration/ (hidden: not a run)
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 96
REQUESTS_PER_SLOT = 3  # requests per concurrency slot
PAIRED_ROUNDS = 9  # rounds of a window timed beside the plain engine (one per slot each)
UNDRAFTED_STEPS = "timed apart, checked against noise"  # in a model-free proposer's identity
K0_LEVELS = "timed per token"  # in a K schedule's identity (:func:`without_drafts`)
PROMPT_TEXT = "Think step by step. 12 + 7 = 19, 19 * 3 = 57, 57 - 8 = 49. #### 49\n"


@dataclass(frozen=True)
class Timing:
    """One request's decode time and units (verify steps with drafts, or tokens - 1); at
    K > 0 also its steps without drafts and the time and count of its steps that emitted
    two or more tokens (drafted, some accepted)."""

    decode_s: float
    units: int
    undrafted: int = 0
    multi_s: float = 0.0
    multi: int = 0
    multi_sq: float = 0.0  # sum of the squared durations of those steps (their spread)


def decode_timing(first_token_ts: float, last_token_ts: float, units: int) -> Timing:
    """A request's decode time (e2e - TTFT = last - first token time) over ``units``."""
    return Timing(last_token_ts - first_token_ts, units)


def step_timing(stream: Sequence[tuple[float, int]], drafted: int) -> Timing:
    """A speculative request's timing from its streamed ``(timestamp, tokens so far)``, one
    per engine step from the first token on, and its verify steps with drafts (vLLM's
    ``num_drafts``): the other engine steps had no drafts (prompt lookup found no match)."""
    times = [t for t, _ in stream]
    emitted = [b - a for (_, a), (_, b) in pairwise(stream)]
    durations = [b - a for a, b in pairwise(times)]
    multi = [d for d, e in zip(durations, emitted, strict=True) if e > 1]
    return Timing(
        decode_s=times[-1] - times[0],
        units=drafted,
        undrafted=max(len(durations) - drafted, 0),
        multi_s=sum(multi),
        multi=len(multi),
        multi_sq=sum(d * d for d in multi),
    )


def token_units(output_tokens: int) -> int:
    """Decode units of a plain request: every token after the first (as TPOT counts)."""
    return max(output_tokens - 1, 0)


def per_unit_s(timings: Iterable[Timing]) -> float | None:
    """Pooled seconds per unit: summed decode time / summed units; None without units."""
    timings = list(timings)
    units = sum(t.units for t in timings)
    return sum(t.decode_s for t in timings) / units if units else None


def step_costs(timings: Iterable[Timing]) -> tuple[float | None, float | None]:
    """Pooled seconds per verify step with drafts and per engine step without.

    With no undrafted step (a draft model drafts at every step) the first is decode time /
    verify steps. Otherwise a verify step is priced by the steps that emitted two or more
    tokens (drafted: what a step costs does not depend on how many drafts pass) and the
    undrafted steps get the rest of the decode time; None where the data cannot tell. The
    rest is the verify steps' noise times units / undrafted steps, so it prices a step only
    when it lies more than two standard errors above 0 and no more than two above a verify
    step (a step without drafts runs the target on one token, a verify step on K + 1);
    else the cost model charges those steps the target's calibrated time per token.
    """
    timings = list(timings)
    undrafted = sum(t.undrafted for t in timings)
    if not undrafted:
        return per_unit_s(timings), None
    multi = sum(t.multi for t in timings)
    if not multi:
        return None, None
    drafted_s = sum(t.multi_s for t in timings) / multi
    units = sum(t.units for t in timings)
    undrafted_s = (sum(t.decode_s for t in timings) - drafted_s * units) / undrafted
    if multi < 2:
        return drafted_s, None
    variance = max(sum(t.multi_sq for t in timings) / multi - drafted_s**2, 0.0)
    noise = 2 * math.sqrt(variance / (multi - 1)) * units / undrafted
    return drafted_s, undrafted_s if noise < undrafted_s <= drafted_s + noise else None


@dataclass(frozen=True)
class Measurement:
    """One engine spec at one concurrency, pooled over ``requests``: seconds per target
    token (K = 0) or per verify step with drafts (K > 0, ``units`` of them), and per engine
    step without drafts (``undrafted`` of them; None when there were none)."""

    concurrency: int
    requests: int
    decode_s: float
    units: int
    per_unit_s: float | None
    undrafted: int = 0
    undrafted_step_s: float | None = None
    # K > 0 on an interleaved job: the plain target's seconds per token, measured on the
    # job's baseline engine in alternating rounds with it (the same window as
    # ``per_unit_s``), as the rounds' median ratio to ``per_unit_s`` gives it
    baseline_per_unit_s: float | None = None


@dataclass(frozen=True)
class Entry:
    """What one calibration file is about: an engine spec under the sweep's model names."""

    target: str  # the job's ``target`` column (the draft's name for a draft-as-target entry)
    draft: str | None  # the job's ``draft`` column; None at K = 0 (but speculation off)
    k: int  # 0 for a plain engine or speculation off: measured per token
    spec: Any  # harness.backends.engine.EngineSpec

    @property
    def k_schedule(self) -> str | None:
        """The spec's K schedule as its label (``1-32k0``), None at one K."""
        return schedule.label(self.spec.k_schedule)


def speculation_off(entry: Entry) -> Entry:
    """A speculator's engine with speculation off: vLLM's per-batch-size schedule at K = 0
    for every batch size, the draft or head loaded; measured per token (K = 0)."""
    batch = dict(entry.spec.settings)["max_num_seqs"]
    return Entry(
        entry.target, entry.draft, 0, replace(entry.spec, k=1, k_schedule=((1, batch, 0),))
    )


def _named(model: str) -> str:
    """A model as the identity names it: a local one relative to the checkout when inside
    it (where a checkout sits is not part of what ran), else as given (a hub id)."""
    return (looks_local(model) and provenance.in_checkout(model)) or model


def identity(entry: Entry) -> dict[str, Any]:
    """Everything the cached numbers depend on: engine arguments, models (the run key's
    identity), the calibration's settings, the installed versions and the hardware."""
    spec = entry.spec
    kwargs = spec.llm_kwargs()
    kwargs["model"] = _named(kwargs["model"])
    if "model" in kwargs.get("speculative_config", {}):
        kwargs["speculative_config"]["model"] = _named(kwargs["speculative_config"]["model"])
    ident = {
        "llm_kwargs": kwargs,
        "env": spec.env(),
        "models": {
            _named(m): provenance.model_identity(m)["digest"]
            for m in (spec.target, spec.draft)
            if m
        },
        "versions": provenance.versions(),
        "hardware": provenance.hardware(dict(spec.settings)["device"]),
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "requests_per_slot": REQUESTS_PER_SLOT,
    }
    if entry.k > 0:  # earlier files timed the job's baseline all before its engine, then
        # in three alternating rounds pooled
        ident["baseline"] = f"median ratio of {PAIRED_ROUNDS} alternating rounds"
    if entry.k > 0 and not speculators.get(spec.method).drafts_every_step:
        # steps without drafts are timed apart (earlier files charged them to verify)
        ident["undrafted_steps"] = UNDRAFTED_STEPS
    if entry.k > 0 and schedule.has_k0(spec.k_schedule):  # earlier files priced verify steps at
        ident["k0_levels"] = K0_LEVELS  # its K = 0 levels (see :func:`stale_schedule`)
    return ident


def cache_key(entry: Entry) -> str:
    """The calibration file's name: a digest of :func:`identity`."""
    return json_digest(identity(entry), default=str)


def job_entry(cfg: Any, spec: Any = None) -> Entry:
    """The engine spec of a composed job config (``spec`` when given: the one the job
    runs), under the job's model names; a what-if spec as its speculator's own (a step
    costs the same whichever drafts are accepted)."""
    from harness.backends.engine import EngineSpec
    from harness.sweep.runner import speculator

    spec = replace(spec or EngineSpec.from_config(cfg), synthetic_acceptance_length=None)
    return Entry(cfg.models.targets[cfg.variant.target], speculator(cfg), spec.k, spec)


def entries(cfgs: Iterable[Any]) -> dict[Entry, set[int]]:
    """Engine specs of the planned jobs (plus each speculative job's plain target, which
    prices the cost model's steps without drafts and c; each draft model as a plain
    target: a head cannot run alone; and each speculator at one K planned closed loop at
    two or more concurrencies with speculation off), each with the concurrencies its jobs
    run at."""
    from harness.backends.engine import EngineSpec

    wanted: dict[Entry, set[int]] = {}
    off: dict[Entry, set[int]] = {}
    for cfg in cfgs:
        job = job_entry(cfg)
        wanted.setdefault(job, set()).add(cfg.concurrency)
        if job.k == 0:
            continue
        target = Entry(job.target, None, 0, EngineSpec.baseline(cfg))
        wanted.setdefault(target, set()).add(cfg.concurrency)
        if speculators.get(job.spec.method).timed_as_target:
            plain = EngineSpec.plain(job.spec.draft, dict(job.spec.settings))
            wanted.setdefault(Entry(str(job.draft), None, 0, plain), set()).add(cfg.concurrency)
        if not job.spec.k_schedule and cfg.request_rate is None:
            off.setdefault(speculation_off(job), set()).add(cfg.concurrency)
    return wanted | {entry: levels for entry, levels in off.items() if len(levels) > 1}


def prompts(tokenizer: Any, n: int) -> list[list[int]]:
    """``n`` distinct prompts of :data:`PROMPT_TOKENS` in-vocabulary token ids."""
    ids = tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    ids = ids * (1 + (PROMPT_TOKENS + n) // max(len(ids), 1))
    return [ids[i : i + PROMPT_TOKENS] for i in range(n)]


def sampling_params() -> Any:
    """Greedy, :data:`OUTPUT_TOKENS` tokens past any end of sequence, one output per step."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        temperature=0.0,
        max_tokens=OUTPUT_TOKENS,
        ignore_eos=True,
        output_kind=RequestOutputKind.CUMULATIVE,
    )


def measure(
    llm: Any,
    tokenizer: Any,
    k: int,
    concurrency: int,
    requests: int | None = None,
    baseline: Any = None,
) -> Measurement:
    """Time ``requests`` x ``concurrency`` fixed-length requests on a live engine. With
    ``baseline`` (its target's live plain engine) the requests run in ``requests`` rounds
    of ``concurrency``, each round's prompts on ``baseline`` right before, so both sides
    are timed over one stretch of the machine; ``baseline_per_unit_s`` is then the plain
    cost that gives the rounds' median ratio of the two (a slow spell on one side of a
    round moves that round only)."""
    rounds = requests or (REQUESTS_PER_SLOT if baseline is None else PAIRED_ROUNDS)
    batch = prompts(tokenizer, rounds * concurrency)
    timings, plain, ratios = [], None, []
    if baseline is None:
        timings = _time(llm, batch, k, concurrency)
    else:
        for i in range(0, len(batch), concurrency):
            plain_s = per_unit_s(_time(baseline, batch[i : i + concurrency], 0, concurrency))
            timings += _time(llm, batch[i : i + concurrency], k, concurrency)
            step_s = step_costs(timings[-concurrency:])[0]
            if plain_s and step_s:
                ratios.append(step_s / plain_s)
    drafted_s, undrafted_s = step_costs(timings)
    if drafted_s and ratios:
        plain = drafted_s / statistics.median(ratios)
    return Measurement(
        concurrency=concurrency,
        requests=len(timings),
        decode_s=sum(t.decode_s for t in timings),
        units=sum(t.units for t in timings),
        per_unit_s=drafted_s,
        undrafted=sum(t.undrafted for t in timings),
        undrafted_step_s=undrafted_s,
        baseline_per_unit_s=plain,
    )


def _time(llm: Any, batch: list[list[int]], k: int, concurrency: int) -> list[Timing]:
    """Each request's :class:`Timing` of ``batch`` run on ``llm`` at ``concurrency``."""
    from harness.backends.offline import generate

    streams: dict[str, list[tuple[float, int]]] = {}
    timings: list[Timing] = []

    def on_step(output: Any) -> None:
        tokens = len(output.outputs[0].token_ids)
        streams.setdefault(output.request_id, []).append((output.metrics.last_token_ts, tokens))

    def on_output(_: int, output: Any) -> None:
        completion, stats = output.outputs[0], output.metrics
        spec = completion.spec_decode_metrics
        if k > 0:
            drafted = metrics.counts_from_histogram(spec.histogram, spec.num_draft_tokens)
            timings.append(step_timing(streams.pop(output.request_id), drafted.num_steps))
        else:
            units = token_units(len(completion.token_ids))
            timings.append(decode_timing(stats.first_token_ts, stats.last_token_ts, units))

    stream = on_step if k > 0 else None  # plain decoding needs only the final outputs
    generate(llm, batch, sampling_params(), concurrency, on_output, stream)
    return timings


def without_drafts(m: Measurement) -> Measurement:
    """A K schedule's level at K = 0, timed per token: every step is one without drafts,
    and no verify step is priced there."""
    return replace(m, units=0, per_unit_s=None, undrafted=m.units, undrafted_step_s=m.per_unit_s)


def describe(m: Measurement, k: int) -> str:
    """The measured costs in words (ms per token, or per verify step and undrafted step)."""

    def ms(seconds: float | None) -> str:
        return "unknown" if seconds is None else f"{seconds * 1000:.2f} ms"

    if not k:
        return f"{ms(m.per_unit_s)} per token"
    if not m.units and m.undrafted_step_s is not None:  # :func:`without_drafts`
        return f"K = 0 at this batch size, {ms(m.undrafted_step_s)} per token"
    text = f"{ms(m.per_unit_s)} per verify step ({m.units} steps)"
    if m.undrafted:
        text += f", {ms(m.undrafted_step_s)} per step without drafts ({m.undrafted} steps)"
    return text


def read(path: Path) -> dict[str, Any] | None:
    """A calibration file, or None when missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def reference(llm: Any, tokenizer: Any, k: int, requests: int) -> float | None:
    """The drift sentinel: the median seconds per unit of ``requests`` fixed requests,
    timed one after another (None when none had a unit)."""
    batch = prompts(tokenizer, 1) * requests
    times = [step_costs([t])[0] for t in _time(llm, batch, k, 1)]
    timed = [t for t in times if t is not None]
    return statistics.median(timed) if timed else None


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
    cached = None if force else read(path)
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
    for concurrency in todo:
        k0 = entry.k > 0 and entry.spec.k_at(concurrency) == 0  # a schedule's K = 0 level
        paired_with = baseline if paired else None
        measured = measure(llm, tokenizer, 0 if k0 else entry.k, concurrency, baseline=paired_with)
        if k0:
            measured = without_drafts(measured)
        done[concurrency] = asdict(measured)
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


def replace_stale(path: Path, record: dict[str, Any]) -> Path:
    """Delete the other calibration files of ``record``'s target, draft, K and K schedule,
    ``path`` its own (measured before the models were rebuilt or the engine changed): a
    report reads every file."""

    def about(r: dict[str, Any]) -> tuple:
        return r["target"], r["draft"], r["k"], schedule_of(r)

    for other in path.parent.glob("*.json"):
        old = read(other) if other != path else None
        if old is not None and about(old) == about(record):
            other.unlink()
    return path


def on_live_engine(cfg: Any, spec: Any, llm: Any, baseline: Any = None) -> None:
    """Calibrate a job's engine ``spec``, live as ``llm``, at the job's concurrency unless
    measured (``baseline``: the live plain engine an interleaved job runs beside); a what-if
    engine is not its entry's, so ``python -m harness.sweep.calibrate`` times that one."""
    from harness.results import sweep_dir

    if spec.synthetic_acceptance_length is not None:
        return
    out = sweep_dir(cfg) / CALIBRATION
    calibrate(job_entry(cfg, spec), [cfg.concurrency], out, False, llm, baseline)


def schedule_of(record: dict[str, Any]) -> str | None:
    """A record's K schedule label; for files written before records named it, read from
    the engine arguments in its identity."""
    if "k_schedule" in record:
        return record["k_schedule"]
    return schedule.label(_ranges(record))


def save(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (keys: target, draft, k, k_schedule, identity,
    measurements: concurrency -> :class:`Measurement` fields)."""
    return write_text(path, json.dumps(record, indent=1, default=str))


def table(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per cached (engine spec, concurrency) of a sweep: target, draft, k,
    k_schedule (None at one K), concurrency, per_unit_s (seconds per token at K = 0 and
    with speculation off, per verify step with drafts at K > 0), undrafted_step_s (per
    engine step without drafts; None when none ran),
    baseline_per_unit_s (the plain target's seconds per token in the same window; None
    unless measured beside an interleaved job's baseline)."""
    rows = []
    for path in sorted((sweep_dir / CALIBRATION).glob("*.json")):
        record = read(path) or {}
        if stale_schedule(record):
            continue
        for c, m in record.get("measurements", {}).items():
            rows.append({"target": record["target"], "draft": record["draft"],
                         "k": record["k"], "k_schedule": schedule_of(record),
                         "concurrency": int(c),
                         "per_unit_s": m["per_unit_s"],
                         "undrafted_step_s": m.get("undrafted_step_s"),
                         "baseline_per_unit_s": m.get("baseline_per_unit_s")})  # fmt: skip
    return rows


def stale_schedule(record: dict[str, Any]) -> bool:
    """A K schedule's file written before its K = 0 levels were timed per token."""
    has_k0 = record.get("k", 0) > 0 and schedule.has_k0(_ranges(record))
    return has_k0 and "k0_levels" not in record["identity"]


def _ranges(record: dict[str, Any]) -> list[list[int]]:
    """The K schedule ranges in a record's engine arguments ([] at one K)."""
    return schedule.of_llm_kwargs(record.get("identity", {}).get("llm_kwargs", {}))


def planned_jobs(overrides: list[str]) -> list[tuple[Any, PreparedJob]]:
    """The composed configs of the jobs ``python -m harness -m <overrides>`` would run, each
    with its job as the harness prepares it before any engine starts (``runner.prepare``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness.config import check_group_overrides, check_overrides, compose_config
    from harness.sweep.runner import prepare
    from harness.sweep.sweeper import plan

    check_group_overrides(overrides)
    check_overrides(overrides)
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
    grid = compose_config(fixed, return_hydra_config=True).hydra.sweeper.params or {}
    every = [f"{k}={v}" for k, v in grid.items()] + overrides
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(every), None)
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
    beside = {job_entry(cfg): job.baseline for cfg, job in planned
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
