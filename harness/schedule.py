"""K schedules: vLLM's ``num_speculative_tokens_per_batch_size``, ``[[first, last, K], ...]``
(inclusive batch-size ranges from 1, sorted), checked, labelled, looked up and read back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from harness.errors import ConfigError

KEY = "spec.k_schedule"


def check(k: int, schedule: Any) -> list[list[int]]:
    """The schedule if vLLM accepts it as given (its own validator; ranges sorted) and its
    every K is at most ``k``.

    Raises:
        ConfigError: one line naming the schedule and what is wrong with it.
    """
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    shown = str(schedule).replace(" ", "").replace("'", "")
    if k <= 0:
        raise ConfigError(f"{KEY}={shown}: needs spec.k > 0 (the largest K it may choose)")
    triples = isinstance(schedule, list) and schedule and all(
        isinstance(e, list | tuple) and len(e) == 3
        and all(isinstance(x, int) and not isinstance(x, bool) for x in e)
        for e in schedule
    )  # fmt: skip
    if isinstance(schedule, str):
        raise ConfigError(
            f"{KEY}={shown}: a list, not a string: drop the quotes around the list "
            "(e.g. 'spec.k_schedule=[[1,4,3],[5,32,0]]')"
        )
    if not triples:
        raise ConfigError(f"{KEY}={shown}: expected [[first, last, K], ...], three integers each")
    try:
        parsed = [list(e) for e in validate_and_normalize_dynamic_sd_schedule(schedule)]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{KEY}={shown}: {exc}") from None
    if parsed != [list(e) for e in schedule]:
        ordered = str(parsed).replace(" ", "")
        raise ConfigError(f"{KEY}={shown}: ranges must be sorted by batch size ({ordered})")
    top = max(entry[2] for entry in parsed)
    if top > k:
        raise ConfigError(f"{KEY}={shown}: chooses K={top} above spec.k={k}")
    return parsed


def label(schedule: Iterable[Sequence[int]] | None) -> str | None:
    """A schedule as ``1-4k3_5-32k0`` (batch sizes 1-4 at K = 3, 5-32 at K = 0)."""
    if not schedule:
        return None
    return "_".join(f"{first}-{last}k{k}" for first, last, k in schedule)


def k_at(schedule: Iterable[Sequence[int]], k: int, max_num_seqs: int, batch: int) -> int:
    """The K drafted with ``batch`` requests in flight: vLLM's own lookup (a range's K holds
    through a gap and the tail, capped at ``k``)."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    ranges = [list(e) for e in schedule]
    return build_dynamic_sd_schedule_lookup(ranges, max_num_seqs, k)[batch] if ranges else k


def has_k0(schedule: Iterable[Sequence[int]]) -> bool:
    """Whether a schedule turns speculation off at some batch size."""
    return any(k == 0 for *_, k in schedule)


def of_llm_kwargs(llm_kwargs: dict[str, Any]) -> list[list[int]]:
    """The schedule in an engine's ``vllm.LLM`` arguments ([] at one K)."""
    speculative = llm_kwargs.get("speculative_config") or {}
    return speculative.get("num_speculative_tokens_per_batch_size") or []


def from_levels(levels: Sequence[int], best: dict[int, int]) -> list[list[int]]:
    """A schedule from the best K at each measured batch size (sorted ``levels``): each
    level's K holds from halfway (geometrically) after the level below to halfway before
    the level above; neighbours of one K merge."""
    import math

    out: list[list[int]] = []
    for i, level in enumerate(levels):
        first = 1 if i == 0 else out[-1][1] + 1
        last = math.isqrt(level * levels[i + 1]) if i + 1 < len(levels) else level
        if out and out[-1][2] == best[level]:
            out[-1][1] = last
        else:
            out.append([first, max(first, last), best[level]])
    return out
