"""Interleaved pairing: the order in which a job's engine (side A) and its baseline engine
(side B; at K = 0 a second instance of the same engine, the A/A check) receive the same
problems, window by window in the order of :data:`PATTERN` (:func:`turns`) with a short
unrecorded request (``settle``) before each switch's first window, and the join of the two sides' records
(:func:`join`). Definitions: docs/METRICS.md; what it was measured to do: docs/PAIRING.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from harness.records import RequestRecord

JOB, BASELINE = "A", "B"
PATTERN = "ABBA"


def turns(n: int, window: int, pattern: str = PATTERN) -> list[tuple[str, range]]:
    """(side, problem indices) in run order: ``n`` problems in windows of ``window``, the
    sides of window w in the order of ``pattern``'s pair w (mod its length / 2)."""
    if n < 0 or window < 1 or len(pattern) % 2 or set(pattern) != {JOB, BASELINE}:
        raise ValueError(f"turns({n}, {window}, {pattern!r}): bad arguments")
    pairs = [pattern[i : i + 2] for i in range(0, len(pattern), 2)]
    if any(sorted(p) != [JOB, BASELINE] for p in pairs):
        raise ValueError(f"pattern {pattern!r}: each pair of letters must be AB or BA")
    out = []
    for w, start in enumerate(range(0, n, window)):
        ids = range(start, min(start + window, n))
        out += [(side, ids) for side in pairs[w % len(pairs)]]
    return out


def join(
    records: Sequence[RequestRecord], baseline: Sequence[RequestRecord]
) -> list[RequestRecord]:
    """The job's records, each with its problem's baseline timing (its send time too, from
    its own window's first send) and output hash.

    Raises:
        ValueError: the two sides did not answer the same problems in the same order.
    """
    if [r.problem_id for r in records] != [b.problem_id for b in baseline]:
        raise ValueError("pairing: the job and its baseline answered different problems")
    return [
        dataclasses.replace(
            r,
            pair_sent_s=b.sent_s,
            pair_ttft_s=b.ttft_s,
            pair_e2e_s=b.e2e_s,
            pair_tpot_s=b.tpot_s,
            pair_output_tokens=b.output_tokens,
            pair_output_hash=b.output_hash,
        )
        for r, b in zip(records, baseline, strict=True)
    ]
