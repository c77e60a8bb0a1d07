"""One job's work: problems -> chat prompts -> a backend -> records.

:func:`prepare` does everything that needs no engine (and raises ConfigError on bad
input); :func:`run` sends the prompts through a live backend
(:class:`harness.backends.base.Generator`: a ``vllm.LLM`` stepped here keeping
``concurrency`` requests in flight, or a server streamed over HTTP at the job's load) and
returns one :class:`RequestRecord` per problem. Prompts are rendered with the target tokenizer's chat
template and sent as token ids, so the length check and the engine see the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness import backends, console, metrics, schedule, speculators
from harness.backends import memory
from harness.backends.arrivals import Load
from harness.backends.base import Generator
from harness.backends.engine import WARMUP_TOKENS, EngineSpec
from harness.checks import (
    check_model_dir,
    check_prompt_lengths,
    check_spec_len,
    load_tokenizer,
)
from harness.config import ConfigError, validate
from harness.data.datasets import load_problems
from harness.data.grading import grade
from harness.data.problems import Problem
from harness.data.prompts import build_messages, prompt_token_ids
from harness.measure import pairing
from harness.records import Completion, JobInfo, RequestRecord
from harness.results import job_name


@dataclass(frozen=True)
class Request:
    """A problem and its rendered prompt."""

    problem: Problem
    prompt_token_ids: tuple[int, ...]


@dataclass(frozen=True)
class PreparedJob:
    """A checked job, ready for an engine."""

    info: JobInfo
    spec: EngineSpec
    requests: tuple[Request, ...]
    max_tokens: int
    warmup: int = 0  # warm-up rounds before the recorded requests
    baseline: EngineSpec | None = None  # the plain engine interleaved with ``spec``, if any
    burstiness: float = 1.0  # open-loop arrivals: gaps ~ Gamma(burstiness)
    pair_window: int | None = None  # interleaved: requests per turn (None: concurrency)

    @property
    def specs(self) -> tuple[EngineSpec, ...]:
        """The engines the job runs on: its own, then its baseline when interleaved."""
        return (self.spec,) if self.baseline is None else (self.spec, self.baseline)

    @property
    def load(self) -> Load:
        """How the job's requests arrive: its concurrency, request rate and burstiness."""
        info = self.info
        return Load(info.concurrency, info.request_rate, self.burstiness, info.seed)

    @property
    def window(self) -> int:
        """Requests in each side's turn when interleaved (``pair_window``, else concurrency)."""
        return self.pair_window or self.info.concurrency

    def sampling_params(self, max_tokens: int | None = None) -> Any:
        """vLLM sampling parameters (the seed is per request, not per engine)."""
        from vllm import SamplingParams

        return SamplingParams(
            temperature=self.info.temperature,
            seed=self.info.seed,
            max_tokens=max_tokens or self.max_tokens,
            # a what-if run times a fixed length: its text is not the target's anyway
            ignore_eos=self.info.synthetic_acceptance_length is not None,
        )


def speculator(cfg: Any) -> str | None:
    """The ``draft`` column: the speculator's checkpoint (a draft model or a head), the
    model-free method's name (ngram, mtp), or None at k = 0."""
    if cfg.spec.k == 0:
        return None
    return cfg.models.drafts[cfg.variant.draft] if cfg.variant.draft else cfg.variant.method


def job_info(cfg: Any) -> JobInfo:
    """The identifying columns of a composed job config."""
    return JobInfo(
        sweep_id=cfg.sweep,
        run_id=job_name(cfg),
        experiment=cfg.experiment,
        variant=cfg.variant.name,
        target=cfg.models.targets[cfg.variant.target],
        draft=speculator(cfg),
        k=cfg.spec.k,
        dataset=cfg.dataset.name,
        difficulty=cfg.dataset.difficulty,
        prompt_style=cfg.variant.prompt_style,
        temperature=float(cfg.temperature),
        seed=cfg.seed,
        concurrency=cfg.concurrency,
        repeat=cfg.repeat,
        backend=cfg.backend,
        request_rate=None if cfg.request_rate is None else float(cfg.request_rate),
        k_schedule=schedule.label(cfg.spec.k_schedule) if cfg.spec.k > 0 else None,
        instances=cfg.instances,
        method=cfg.variant.method if cfg.spec.k > 0 else None,
        draft_sample_method=(
            cfg.spec.draft_sample_method
            if cfg.spec.k > 0 and speculators.of(cfg.variant).samples_drafts
            else None
        ),
        synthetic_acceptance_length=(
            cfg.spec.synthetic_acceptance_length if cfg.spec.k > 0 else None
        ),
    )


@dataclass(frozen=True)
class Engines:
    """The engines a job runs on: its own and, interleaved, its baseline (the target's plain
    engine; at K = 0 a second instance of itself), or why it runs alone though interleaved."""

    spec: EngineSpec
    baseline: EngineSpec | None
    alone: str | None = None  # pairing=interleaved but alone: why
    estimates: tuple[Any, ...] = ()  # interleaved: each side's memory estimate (or a note)


def choose_engines(cfg: Any, bases: tuple[str | None, str | None] = (None, None)) -> Engines:
    """The one decision of interleaved or sequential: a pair when ``pairing=interleaved``,
    the job's backend allows a baseline beside it (``Backend.alone``) and both fit one device
    (each with half of ``gpu_memory_utilization`` on a GPU), else the job's engine alone. The
    baseline is laid out as the backend runs it beside the job's engine (``Backend.beside``).
    ``bases``: the base models of models not built yet (``harness.backends.memory``)."""
    spec = EngineSpec.from_config(cfg)
    if cfg.pairing != "interleaved":
        return Engines(spec, None)
    if why := backends.of(cfg).alone(cfg):
        return Engines(spec, None, why)
    plain = backends.of(cfg).beside(spec, EngineSpec.baseline(cfg))
    pair = (spec.sharing(2), plain.sharing(2))
    try:
        estimates = tuple(memory.fit(s, cfg.concurrency, bases) for s in pair)
    except ConfigError as exc:
        return Engines(spec, None, f"the pair does not fit ({exc})")
    return Engines(*pair, estimates=estimates)


def engine_specs(cfg: Any) -> tuple[EngineSpec, EngineSpec | None]:
    """The job's engine spec and its baseline's (:func:`choose_engines`), saying in one line
    why an interleaved job runs alone.

    Raises:
        ConfigError: the job's own engine cannot fit its GPU.
    """
    engines = choose_engines(cfg)
    if engines.alone:
        print(f"pairing=interleaved: {engines.alone}; running the job alone (pairing=sequential)")
    if engines.baseline is None:
        memory.fit(engines.spec, cfg.concurrency)
    return engines.spec, engines.baseline


def prepare(cfg: Any) -> PreparedJob:
    """Validate, check models and tokenizers, load problems and render prompts.

    Raises:
        ConfigError: a bad value, a missing model directory, an engine that cannot fit
            its GPU (``harness.backends.memory``), draft and target tokenizers that differ, or a
            prompt that does not fit max_model_len.
        DatasetError: problems that cannot be loaded.
    """
    validate(cfg)
    info = job_info(cfg)
    check_model_dir(f"models.targets.{cfg.variant.target}", info.target)
    if cfg.spec.k > 0 and cfg.variant.draft is not None:
        check_model_dir(f"models.drafts.{cfg.variant.draft}", info.draft)
    check_spec_len(cfg.spec.k, cfg.engine.max_model_len)
    spec, baseline = engine_specs(cfg)
    info = replace(info, pairing="sequential" if baseline is None else "interleaved")
    if spec.method is not None:
        speculators.get(spec.method).check(spec.target, spec.draft)
    tokenizer = load_tokenizer(spec.target)
    requests = []
    for problem in load_problems(cfg.dataset, cfg.limit):
        messages = build_messages(problem, cfg.variant.prompt_style, cfg.prompts)
        requests.append(Request(problem, tuple(prompt_token_ids(tokenizer, messages))))
    if cfg.instances > len(requests):
        raise ConfigError(
            f"instances={cfg.instances}: more engine instances than the {len(requests)} "
            f"problems of {cfg.dataset.name}; use instances={len(requests)} or fewer"
        )
    check_prompt_lengths(
        {r.problem.id: len(r.prompt_token_ids) for r in requests},
        cfg.max_tokens,
        cfg.engine.max_model_len,
    )
    return PreparedJob(
        info,
        spec,
        tuple(requests),
        cfg.max_tokens,
        cfg.warmup,
        baseline,
        cfg.burstiness,
        cfg.pair_window,
    )


def spec_counts(completion: Completion) -> metrics.SpecCounts | None:
    """A completion's verify steps, drafted and accepted tokens (None without speculation)."""
    if completion.histogram is None or completion.num_draft_tokens is None:
        return None
    return metrics.counts_from_histogram(completion.histogram, completion.num_draft_tokens)


def to_record(
    info: JobInfo, request: Request, completion: Completion, tokenizer: Any
) -> RequestRecord:
    """The record of one finished request."""
    ids = completion.token_ids
    verdict = grade(completion.text, request.problem.gold_answer, request.problem.answer_style)
    counts = spec_counts(completion)
    accepted, drafted = completion.per_step_accepted, completion.per_step_drafted
    steps = accepted is not None and drafted is not None
    positions = metrics.rejected_positions(accepted, drafted, len(ids)) if steps else None
    rejections = None if positions is None else tuple(tokenizer.decode([ids[i]]) for i in positions)
    thirds = metrics.acceptance_by_third(accepted, drafted, len(ids)) if steps else None
    return RequestRecord(
        job=info,
        problem_id=request.problem.id,
        prompt_tokens=len(request.prompt_token_ids),
        output_tokens=len(ids),
        finish_reason=completion.finish_reason,
        pred_answer=verdict.pred_answer,
        gold_answer=request.problem.gold_answer,
        correct=verdict.correct,
        extractor=verdict.extractor,
        correct_strict=verdict.correct_strict,
        correct_flexible=verdict.correct_flexible,
        ttft_s=completion.ttft_s,
        e2e_s=completion.e2e_s,
        tpot_s=metrics.tpot(completion.decode_s, len(ids)),
        num_spec_steps=counts.num_steps if counts else None,
        num_draft_tokens=counts.num_draft_tokens if counts else None,
        num_accepted_tokens=counts.num_accepted_tokens if counts else None,
        acceptance_rate=(
            metrics.acceptance_rate(counts.num_accepted_tokens, counts.num_draft_tokens)
            if counts
            else None
        ),
        mean_acceptance_length=(
            metrics.mean_acceptance_length(counts.num_accepted_tokens, counts.num_steps)
            if counts
            else None
        ),
        acceptance_histogram=completion.histogram,
        output_hash=metrics.output_hash(ids),
        output_token_ids=ids,
        rejection_tokens=rejections,
        accepted_thirds=thirds[0] if thirds else None,
        drafted_thirds=thirds[1] if thirds else None,
        sent_s=completion.sent_s,
        itl_s=completion.itl_s,
    )


def _ignore(index: int, completion: Completion) -> None:
    pass


def warm_up(job: PreparedJob, backend: Generator) -> None:
    """``job.warmup`` unrecorded rounds of min(concurrency, problems) of the job's own prompts
    at its concurrency and sampling settings, a few tokens each (as vLLM's benchmarks warm up)."""
    width = min(job.info.concurrency, len(job.requests))
    prompts = [r.prompt_token_ids for r in job.requests[:width]] * job.warmup
    params = job.sampling_params(min(WARMUP_TOKENS, job.max_tokens))
    if prompts:
        backend.generate(prompts, params, Load(job.info.concurrency), _ignore)


def interleave(
    job: PreparedJob,
    backends: dict[str, Generator],
    on_output: dict[str, Callable[[int, Completion], None]],
    pattern: str = pairing.PATTERN,
    settle: bool = True,
    on_settle: Callable[[str, Completion], None] | None = None,
) -> dict[str, float]:
    """Run every request of ``job`` on both sides (``backends`` by side), window by window
    (``job.window`` requests) in :func:`harness.measure.pairing.turns`'s order, the side
    out of its window paused (a started server's processes stopped); returns each side's
    generation seconds. Both sides of a window get the same load (open-loop: the same
    arrival draws, seeded by the job's seed and the window).

    ``settle``: one unrecorded short request on the backend switched to before its wave
    (the first wave's side too: the other side ran last, its warm-up and the sentinel),
    its completion passed to ``on_settle(side, completion)``.
    """
    prompts = [r.prompt_token_ids for r in job.requests]
    params, short = job.sampling_params(), job.sampling_params(min(WARMUP_TOKENS, job.max_tokens))
    seconds = dict.fromkeys(backends, 0.0)
    done = on_settle or (lambda side, completion: None)
    last = None
    try:
        for side, ids in pairing.turns(len(prompts), job.window, pattern):
            load = replace(job.load, seed=job.load.seed + ids.start // job.window)
            if side != last:  # the other side spends nothing in this side's window
                for other in backends.keys() - {side}:
                    backends[other].pause()
                backends[side].resume()
            if settle and side != last:
                backends[side].generate(
                    [prompts[ids[0]]], short, Load(1), lambda i, out, s=side: done(s, out)
                )
            last = side
            tic = time.perf_counter()
            backends[side].generate(
                [prompts[i] for i in ids],
                params,
                load,
                lambda index, completion, ids=ids, side=side: on_output[side](
                    ids[index], completion
                ),
            )
            seconds[side] += time.perf_counter() - tic
    finally:
        for backend in backends.values():
            backend.resume()
    return seconds


def run(
    job: PreparedJob, backend: Generator, progress: bool = True, baseline: Generator | None = None
) -> tuple[list[RequestRecord], float, metrics.SpecCounts | None]:
    """Generate every request of ``job``; returns the records (problem order), the seconds
    the job's backend spent generating them and its engine counters over those requests
    (read before and after, less the unrecorded requests that settle it after a switch;
    None when it reports none).

    With ``baseline`` (the backend of ``job.baseline``) the requests interleave with the
    same problems on it (:func:`interleave`) and each record carries its pair's timing
    (:func:`harness.measure.pairing.join`). Generation only keeps the finished completions;
    grading, decoding and records come after it, so no request waits on them. The
    progress bar shows the job's problems done, output tokens/s and acceptance so far.
    """
    tokenizer = load_tokenizer(job.spec.target)
    outputs: dict[int, Completion] = {}
    paired: dict[int, Completion] = {}
    totals = {"tokens": 0, "drafted": 0, "accepted": 0}
    bar = console.progress(len(job.requests), job.info.run_id, "req", disable=not progress)
    settled: list[metrics.SpecCounts] = []

    def on_settle(side: str, completion: Completion) -> None:
        counts = spec_counts(completion)
        if side == pairing.JOB and counts is not None:
            settled.append(counts)

    before = backend.spec_counts()
    tic = time.perf_counter()

    def on_output(index: int, completion: Completion) -> None:
        outputs[index] = completion
        totals["tokens"] += len(completion.token_ids)
        counts = spec_counts(completion)
        if counts is not None:
            totals["drafted"] += counts.num_draft_tokens
            totals["accepted"] += counts.num_accepted_tokens
        postfix = {
            "tok/s": f"{metrics.tokens_per_s(totals['tokens'], time.perf_counter() - tic):.1f}"
        }
        rate = metrics.acceptance_rate(totals["accepted"], totals["drafted"])
        if rate is not None:
            postfix["acc"] = f"{rate:.3f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update()

    try:
        if baseline is None:
            prompts = [r.prompt_token_ids for r in job.requests]
            backend.generate(prompts, job.sampling_params(), job.load, on_output)
            wall = time.perf_counter() - tic
        else:
            sides = {pairing.JOB: backend, pairing.BASELINE: baseline}
            sinks = {pairing.JOB: on_output, pairing.BASELINE: paired.__setitem__}
            wall = interleave(job, sides, sinks, on_settle=on_settle)[pairing.JOB]
    finally:
        bar.close()
    counts = metrics.counts_delta(before, backend.spec_counts())
    if settled and counts is not None:
        counts = metrics.counts_delta(metrics.total_counts(settled), counts)
    records = [to_record(job.info, job.requests[i], outputs[i], tokenizer) for i in sorted(outputs)]
    if baseline is not None:
        pairs = [to_record(job.info, job.requests[i], paired[i], tokenizer) for i in sorted(paired)]
        records = pairing.join(records, pairs)
    return records, wall, counts
