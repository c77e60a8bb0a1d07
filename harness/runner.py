"""One job's work: problems -> chat prompts -> generate at concurrency 1 or N -> records.

:func:`prepare` does everything that needs no engine (and raises ConfigError on bad
input); :func:`run` sends the prompts through a live ``vllm.LLM`` keeping
``concurrency`` requests in flight (1 = interactive latency, N = batched load) and
returns one :class:`RequestRecord` per problem. Prompts are rendered with the target
tokenizer's chat template and sent as token ids, so the length check and the engine see
the same tokens.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness import console, memory, metrics
from harness.checks import (
    check_model_dir,
    check_prompt_lengths,
    check_same_vocab,
    check_spec_len,
    load_tokenizer,
)
from harness.config import validate
from harness.datasets import load_problems
from harness.engine import WARMUP_TOKENS, EngineSpec
from harness.grading import grade
from harness.problems import Problem
from harness.prompts import build_messages, prompt_token_ids
from harness.records import JobInfo, RequestRecord
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

    def sampling_params(self, max_tokens: int | None = None) -> Any:
        """vLLM sampling parameters (the seed is per request, not per engine)."""
        from vllm import SamplingParams

        return SamplingParams(
            temperature=self.info.temperature,
            seed=self.info.seed,
            max_tokens=max_tokens or self.max_tokens,
        )


def speculator(cfg: Any) -> str | None:
    """The ``draft`` column: the draft model, the model-free method's name (ngram), or None at k = 0."""
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
        draft_sample_method=(
            cfg.spec.draft_sample_method
            if cfg.spec.k > 0 and cfg.variant.method == "draft_model"
            else None
        ),
    )


def prepare(cfg: Any) -> PreparedJob:
    """Validate, check models and tokenizers, load problems and render prompts.

    Raises:
        ConfigError: a bad value, a missing model directory, an engine that cannot fit
            its GPU (``harness.memory``), draft and target tokenizers that differ, or a
            prompt that does not fit max_model_len.
        DatasetError: problems that cannot be loaded.
    """
    validate(cfg)
    check_spec_len(cfg.spec.k, cfg.engine.max_model_len)
    info = job_info(cfg)
    check_model_dir(f"models.targets.{cfg.variant.target}", info.target)
    if cfg.spec.k > 0 and cfg.variant.draft is not None:
        check_model_dir(f"models.drafts.{cfg.variant.draft}", info.draft)
    spec = EngineSpec.from_config(cfg)
    memory.preflight(spec, cfg.concurrency)
    if spec.draft is not None:
        check_same_vocab(spec.target, spec.draft)
    tokenizer = load_tokenizer(spec.target)
    requests = []
    for problem in load_problems(cfg.dataset, cfg.limit):
        messages = build_messages(problem, cfg.variant.prompt_style, cfg.prompts)
        requests.append(Request(problem, tuple(prompt_token_ids(tokenizer, messages))))
    check_prompt_lengths(
        {r.problem.id: len(r.prompt_token_ids) for r in requests},
        cfg.max_tokens,
        cfg.engine.max_model_len,
    )
    return PreparedJob(info, spec, tuple(requests), cfg.max_tokens, cfg.warmup)


def generate(
    llm: Any,
    prompts: Sequence[Sequence[int]],
    params: Any,
    concurrency: int,
    on_output: Callable[[int, Any], None],
    on_step: Callable[[Any], None] | None = None,
) -> None:
    """Generate every prompt, keeping ``concurrency`` requests in flight.

    Calls ``on_step(RequestOutput)`` for every output of every engine step (``params``
    chooses cumulative or delta outputs), then ``on_output(index, RequestOutput)`` as each
    request finishes.
    """
    pending = iter(enumerate(prompts))
    in_flight: dict[str, int] = {}

    def submit() -> None:
        item = next(pending, None)
        if item is None:
            return
        prompt = {"prompt_token_ids": list(item[1])}
        if on_step is None:
            (request_id,) = llm.enqueue(prompt, params, use_tqdm=False)
        else:  # LLM.enqueue makes a request final-output-only; the engine streams each step
            request_id = llm.llm_engine.add_request(uuid.uuid4().hex, prompt, params)
        in_flight[request_id] = item[0]

    def finished(output_id: str) -> int:
        # enqueue() returns vLLM's internal id "<id>-<random suffix>"; outputs carry "<id>".
        key = next(k for k in in_flight if k == output_id or k.startswith(f"{output_id}-"))
        return in_flight.pop(key)

    for _ in range(concurrency):
        submit()
    while in_flight:
        for output in llm.llm_engine.step():
            if on_step is not None:
                on_step(output)
            if output.finished:
                on_output(finished(output.request_id), output)
                submit()


def latencies(output: Any) -> tuple[float, float]:
    """(TTFT, e2e) seconds of one finished ``vllm.RequestOutput``, both from its arrival."""
    stats = output.metrics
    return stats.first_token_latency, stats.first_token_latency + (
        stats.last_token_ts - stats.first_token_ts
    )


def to_record(info: JobInfo, request: Request, output: Any, tokenizer: Any) -> RequestRecord:
    """The record of one finished ``vllm.RequestOutput``."""
    completion = output.outputs[0]
    ids = tuple(completion.token_ids)
    ttft, e2e = latencies(output)
    verdict = grade(completion.text, request.problem.gold_answer, request.problem.answer_style)
    spec = completion.spec_decode_metrics
    counts = metrics.counts_from_histogram(spec.histogram, spec.num_draft_tokens) if spec else None
    positions = (
        metrics.rejected_positions(spec.per_step_accepted, spec.per_step_drafted, len(ids))
        if spec
        else None
    )
    rejections = None if positions is None else tuple(tokenizer.decode([ids[i]]) for i in positions)
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
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=metrics.tpot(e2e, ttft, len(ids)),
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
        acceptance_histogram=tuple(spec.histogram) if spec else None,
        output_hash=metrics.output_hash(ids),
        output_token_ids=ids,
        rejection_tokens=rejections,
    )


def warm_up(job: PreparedJob, llm: Any) -> None:
    """``job.warmup`` unrecorded rounds of min(concurrency, problems) of the job's own prompts
    at its concurrency and sampling settings, a few tokens each (as vLLM's benchmarks warm up)."""
    width = min(job.info.concurrency, len(job.requests))
    prompts = [r.prompt_token_ids for r in job.requests[:width]] * job.warmup
    params = job.sampling_params(min(WARMUP_TOKENS, job.max_tokens))
    generate(llm, prompts, params, job.info.concurrency, lambda index, output: None)


def run(job: PreparedJob, llm: Any, progress: bool = True) -> tuple[list[RequestRecord], float]:
    """Generate every request of ``job``; returns the records (problem order) and wall seconds.

    Generation only keeps vLLM's finished outputs (ids, text, timestamps, spec metrics);
    grading, decoding and records come after it, so no request waits on them and the wall
    time is generation's. The progress bar shows problems done, output tokens/s and
    acceptance so far.
    """
    tokenizer = load_tokenizer(job.spec.target)
    outputs: dict[int, Any] = {}
    totals = {"tokens": 0, "drafted": 0, "accepted": 0}
    bar = console.progress(len(job.requests), job.info.run_id, "req", disable=not progress)
    tic = time.perf_counter()

    def on_output(index: int, output: Any) -> None:
        outputs[index] = output
        completion = output.outputs[0]
        totals["tokens"] += len(completion.token_ids)
        spec = completion.spec_decode_metrics
        if spec is not None:
            counts = metrics.counts_from_histogram(spec.histogram, spec.num_draft_tokens)
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
        generate(
            llm,
            [r.prompt_token_ids for r in job.requests],
            job.sampling_params(),
            job.info.concurrency,
            on_output,
        )
    finally:
        bar.close()
    wall = time.perf_counter() - tic
    records = [to_record(job.info, job.requests[i], outputs[i], tokenizer) for i in sorted(outputs)]
    return records, wall
