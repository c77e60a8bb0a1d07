"""Pure metric functions: latency, speculative-decoding acceptance, output hashes.

No I/O and no engine: every function takes plain numbers, lists or vLLM's plain data
objects and returns numbers. Definitions (TPOT, acceptance rate, mean acceptance length):
docs/METRICS.md; the analytical model is ``reports.theory``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

# vLLM's global speculative-decoding counters (``LLM.get_metrics()``).
NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounts:
    """Speculative-decoding counts over some set of verify steps.

    ``num_steps`` is vLLM's ``num_drafts`` (one per verify step); ``accepted_per_pos[i]``
    counts steps whose draft token at position ``i`` was accepted.
    """

    num_steps: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]

    def to_row(self) -> dict[str, object]:
        """The summary's ``spec`` block: counts plus the two derived rates."""
        return {
            "num_drafts": self.num_steps,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": list(self.accepted_per_pos),
            "acceptance_rate": acceptance_rate(self.num_accepted_tokens, self.num_draft_tokens),
            "mean_acceptance_length": mean_acceptance_length(
                self.num_accepted_tokens, self.num_steps
            ),
        }


def tpot(decode_s: float, output_tokens: int) -> float | None:
    """Time per output token after the first (s/token) from the seconds between the first
    and the last; None for outputs of < 2 tokens."""
    if output_tokens < 2:
        return None
    return decode_s / (output_tokens - 1)


def acceptance_rate(accepted: int, drafted: int) -> float | None:
    """Accepted / proposed draft tokens, in [0, 1]; None when nothing was proposed."""
    return accepted / drafted if drafted else None


def mean_acceptance_length(accepted: int, steps: int) -> float | None:
    """Tokens emitted per verify step = 1 + accepted / steps; None without steps."""
    return 1.0 + accepted / steps if steps else None


def position_counts(histograms: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Per draft position i = 1..K: the verify steps that reached it and those that accepted it.

    ``histograms[..., j]`` counts the steps that accepted exactly j drafts (the last axis
    holds j = 0..K; leading axes are independent histograms). A step that accepted j
    drafts passed positions 1..j, and position i is tried only after 1..i-1 passed, so
    with S_j = steps accepting j or more, position i was reached S_(i-1) times and
    accepted S_i times (S_0 is every step).

    Returns:
        ``(reached, accepted)``, each shaped like ``histograms`` with one entry fewer on
        the last axis.
    """
    at_least = np.cumsum(np.asarray(histograms)[..., ::-1], axis=-1)[..., ::-1]
    return at_least[..., :-1], at_least[..., 1:]


def counts_from_histogram(histogram: Sequence[int], num_draft_tokens: int) -> SpecCounts:
    """Counts of one request from vLLM's histogram (``histogram[j]`` = steps accepting j)."""
    _, accepted = position_counts(histogram)
    return SpecCounts(
        num_steps=sum(histogram),
        num_draft_tokens=num_draft_tokens,
        num_accepted_tokens=int(accepted.sum()),
        accepted_per_pos=tuple(int(n) for n in accepted),
    )


def total_counts(counts: Iterable[SpecCounts]) -> SpecCounts:
    """Element-wise sum of per-request counts (positions padded to the longest)."""
    counts = list(counts)
    k = max((len(c.accepted_per_pos) for c in counts), default=0)
    per_pos = [0] * k
    for c in counts:
        for i, n in enumerate(c.accepted_per_pos):
            per_pos[i] += n
    return SpecCounts(
        num_steps=sum(c.num_steps for c in counts),
        num_draft_tokens=sum(c.num_draft_tokens for c in counts),
        num_accepted_tokens=sum(c.num_accepted_tokens for c in counts),
        accepted_per_pos=tuple(per_pos),
    )


def counts_from_snapshot(metrics: Iterable[object]) -> SpecCounts | None:
    """vLLM's global spec counters from ``LLM.get_metrics()``, summed over label sets.

    None when the engine reports no speculative-decoding counters (plain decoding).
    """
    scalars: dict[str, int] = {}
    per_pos: list[int] = []
    for m in metrics:
        name = getattr(m, "name", None)
        if name in (NUM_DRAFTS, NUM_DRAFT_TOKENS, NUM_ACCEPTED):
            scalars[name] = scalars.get(name, 0) + int(m.value)
        elif name == ACCEPTED_PER_POS:
            values = [int(v) for v in m.values]
            per_pos = [a + b for a, b in zip(per_pos, values, strict=False)] + values[
                len(per_pos) :
            ]
    if NUM_DRAFTS not in scalars:
        return None
    return SpecCounts(
        num_steps=scalars[NUM_DRAFTS],
        num_draft_tokens=scalars.get(NUM_DRAFT_TOKENS, 0),
        num_accepted_tokens=scalars.get(NUM_ACCEPTED, 0),
        accepted_per_pos=tuple(per_pos),
    )


def counts_delta(before: SpecCounts | None, after: SpecCounts | None) -> SpecCounts | None:
    """``after - before`` of global counters (the engine is reused across jobs)."""
    if after is None:
        return None
    if before is None:
        return after
    return SpecCounts(
        num_steps=after.num_steps - before.num_steps,
        num_draft_tokens=after.num_draft_tokens - before.num_draft_tokens,
        num_accepted_tokens=after.num_accepted_tokens - before.num_accepted_tokens,
        accepted_per_pos=tuple(
            a - (before.accepted_per_pos[i] if i < len(before.accepted_per_pos) else 0)
            for i, a in enumerate(after.accepted_per_pos)
        ),
    )


def counter_mismatch(per_request: SpecCounts, engine: SpecCounts) -> str | None:
    """None when the per-request sums equal the engine's counters, else what differs."""
    fields = ("num_steps", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")
    diffs = [
        f"{f}: requests {getattr(per_request, f)} vs engine {getattr(engine, f)}"
        for f in fields
        if getattr(per_request, f) != getattr(engine, f)
    ]
    return "; ".join(diffs) or None


def rejected_positions(
    per_step_accepted: Sequence[int], per_step_drafted: Sequence[int], num_output_tokens: int
) -> list[int] | None:
    """Indices into the output tokens of the target's correction at each rejection; None
    when the per-step arrays cannot place them.

    The first output token comes from prefill; each recorded verify step then emits its
    ``accepted`` draft tokens plus one token of the target's own, which replaces the
    first rejected draft when ``accepted < drafted``. vLLM records only steps that had
    drafts; a step without drafts emits one token and leaves no trace, so when the output
    is longer than prefill plus the recorded steps, those extra tokens sit at unknown
    places and every later correction shifts: the positions are unknown (None) unless
    nothing was rejected. A shorter output means a stop condition cut the last step;
    positions past the end are dropped.
    """
    emitted = 1 + sum(accepted + 1 for accepted in per_step_accepted)
    rejected = any(a < d for a, d in zip(per_step_accepted, per_step_drafted, strict=True))
    if num_output_tokens > emitted and rejected:
        return None
    positions = []
    end = 1
    for accepted, drafted in zip(per_step_accepted, per_step_drafted, strict=True):
        end += accepted + 1
        if accepted < drafted and end - 1 < num_output_tokens:
            positions.append(end - 1)
    return positions


THIRDS = ("early", "middle", "late")  # thirds of an answer, by output position


def acceptance_by_third(
    per_step_accepted: Sequence[int], per_step_drafted: Sequence[int], num_output_tokens: int
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Accepted and drafted tokens of the verify steps that start in the first, middle and
    last third of the output; None when steps without drafts make the steps' places
    unknown (as in :func:`rejected_positions`)."""
    if num_output_tokens < 1 or num_output_tokens > 1 + sum(a + 1 for a in per_step_accepted):
        return None
    accepted, drafted = [0, 0, 0], [0, 0, 0]
    start = 1  # the first output token comes from prefill
    for a, d in zip(per_step_accepted, per_step_drafted, strict=True):
        third = min(2, 3 * start // num_output_tokens)
        accepted[third] += a
        drafted[third] += d
        start += a + 1
    return tuple(accepted), tuple(drafted)


def output_hash(token_ids: Sequence[int]) -> str:
    """Short stable digest of an output's token ids (equal ids <=> equal hash)."""
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def tokens_per_s(tokens: int, seconds: float) -> float:
    """Throughput in tokens/s; 0 for an empty interval."""
    return tokens / seconds if seconds > 0 else 0.0


SLO_BOUNDS = ("ttft_ms", "tpot_ms", "e2e_ms")  # the bounds an SLO may set, in ms


def meets_slo(
    ttft_s: ArrayLike, tpot_s: ArrayLike, e2e_s: ArrayLike, slo: dict[str, ArrayLike | None]
) -> np.ndarray:
    """Per request, whether it meets every bound of ``slo`` (:data:`SLO_BOUNDS`, in ms; a
    bound may be one per request; None or NaN: no bound), as ``vllm bench serve``'s goodput
    counts it (a one-token output has no TPOT, NaN, and meets its bound)."""
    measured = {
        "ttft_ms": np.asarray(ttft_s, float),
        "tpot_ms": np.nan_to_num(np.asarray(tpot_s, float), nan=0.0),
        "e2e_ms": np.asarray(e2e_s, float),
    }
    ok = np.ones(len(measured["ttft_ms"]), bool)
    for name, bound in slo.items():
        b = np.asarray(np.nan if bound is None else bound, float)
        ok &= np.isnan(b) | (1000 * measured[name] <= b)
    return ok
