"""Timing an engine on fixed requests: each request's decode time and units, pooled into
seconds per target token (K = 0) or per verify step and per step without drafts (K > 0),
optionally in alternating rounds beside the plain target; the drift sentinel's reference.
What is measured: docs/METRICS.md, docs/COST_MODEL.md."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from harness import metrics

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 96
REQUESTS_PER_SLOT = 3  # requests per concurrency slot
PAIRED_ROUNDS = 9  # rounds of a window timed beside the plain engine (one per slot each)
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


def reference(llm: Any, tokenizer: Any, k: int, requests: int) -> float | None:
    """The drift sentinel: the median seconds per unit of ``requests`` fixed requests,
    timed one after another (None when none had a unit)."""
    batch = prompts(tokenizer, 1) * requests
    return _median([step_costs([t])[0] for t in _time(llm, batch, k, 1)])


def served_reference(generator: Any, tokenizer: Any, k: int, requests: int) -> float | None:
    """:func:`reference` over a backend's generator that steps elsewhere (a server): each
    request's whole time (e2e, from its send) over its units (tokens at K = 0, verify steps
    at K > 0). Not e2e - TTFT: a server on busy cores can stream a short answer in one
    burst, which leaves no decode time to read."""
    from harness.backends.arrivals import Load

    timings: list[Timing] = []

    def on_output(_: int, completion: Any) -> None:
        units = len(completion.token_ids)
        if k > 0 and completion.histogram is not None:
            counts = metrics.counts_from_histogram(
                completion.histogram, completion.num_draft_tokens
            )
            units = counts.num_steps
        timings.append(Timing(completion.e2e_s, units))

    params = sampling_params()
    generator.generate(prompts(tokenizer, 1) * requests, params, Load(1), on_output)
    return _median([per_unit_s([t]) for t in timings])


def _median(times: list[float | None]) -> float | None:
    """The median of the requests that had a unit (None when none had)."""
    timed = [t for t in times if t is not None]
    return statistics.median(timed) if timed else None
