"""The analytical model of speculative decoding (Leviathan, Kalman & Matias 2023, sec. 3).

Symbols follow the paper: ``a`` (alpha) the per-token acceptance, ``K`` (gamma) the drafts
per verify step, ``c`` one draft forward's cost over one target forward's. E, the simple
model E / (K c + 1), break-even c and best K; the cost model from measured step times
(:func:`speedup_from_costs`, :func:`decode_steps`); :func:`predict_from_costs`, one row's
c, E, T_step and predicted speedups (``reports.fit`` and ``bench/drafts.py`` call it);
:func:`alpha_mle`. Definitions: docs/METRICS.md. Functions broadcast over numpy arrays
and return a float for scalar inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from harness import metrics

K_MAX = 16  # the largest K :func:`best_k` considers unless told otherwise


def _out(x: np.ndarray) -> np.ndarray | float:
    return float(x) if x.ndim == 0 else x


def expected_tokens(a: ArrayLike, k: ArrayLike) -> np.ndarray | float:
    """Expected tokens emitted per verify step, E = (1 - a^(K+1)) / (1 - a).

    Counts the accepted drafts plus the one token the target always adds (the
    correction at the first rejection, or the bonus token when all K are accepted).
    """
    a, k = np.broadcast_arrays(np.asarray(a, float), np.asarray(k, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a < 1.0, (1.0 - a ** (k + 1.0)) / (1.0 - a), k + 1.0)
    return _out(e)


def modelled_acceptance(a: ArrayLike, k: ArrayLike) -> np.ndarray | float:
    """Accepted / proposed draft tokens (vLLM's rate) under the model: (E - 1) / K. The
    measured rate is ``harness.metrics.acceptance_rate``."""
    k = np.asarray(k, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.asarray((np.asarray(expected_tokens(a, k)) - 1.0) / k))


def predicted_speedup(a: ArrayLike, k: ArrayLike, c: ArrayLike) -> np.ndarray | float:
    """Predicted speedup over plain decoding, E / (K c + 1)."""
    k = np.asarray(k, float)
    return _out(np.asarray(np.asarray(expected_tokens(a, k)) / (k * np.asarray(c, float) + 1.0)))


def break_even_cost(a: ArrayLike, k: ArrayLike) -> np.ndarray | float:
    """The cost ratio c at which K drafts stop paying: speedup = 1 at c* = (E - 1) / K."""
    return modelled_acceptance(a, k)


def best_k(a: ArrayLike, c: ArrayLike, k_max: int = K_MAX) -> np.ndarray | int:
    """The K in 0..k_max with the highest predicted speedup (0 when drafting never pays)."""
    a, c = np.broadcast_arrays(np.asarray(a, float), np.asarray(c, float))
    ks = np.arange(k_max + 1, dtype=float).reshape((-1,) + (1,) * a.ndim)
    best = np.argmax(np.asarray(predicted_speedup(a[None], ks, c[None])), axis=0)
    return int(best) if best.ndim == 0 else best


def position_attempts(accepted_per_pos: ArrayLike, num_drafts: float) -> float:
    """How many draft positions were tried: the steps that reached each position, summed.

    ``accepted_per_pos[i]`` counts the verify steps whose draft at position i+1 was
    accepted (vLLM's ``spec_decode_num_accepted_tokens_per_pos``), ``num_drafts`` the
    verify steps; their differences are the acceptance histogram that
    :func:`harness.metrics.position_counts` reads.
    """
    at_least = np.array([num_drafts, *np.asarray(accepted_per_pos, float), 0.0])
    reached, _ = metrics.position_counts(-np.diff(at_least))  # the histogram of the counts
    return float(reached.sum())


def alpha_mle(accepted_per_pos: Sequence[ArrayLike], num_drafts: Sequence[float]) -> float:
    """Per-token acceptance a pooled over runs (each with its own K): accepted / attempts.

    The maximum-likelihood estimate under the model (every tried position passes with
    probability a), from each run's per-position counts and verify steps; NaN without
    drafts.
    """
    accepted = sum(float(np.sum(p)) for p in accepted_per_pos)
    attempts = sum(
        position_attempts(p, n) for p, n in zip(accepted_per_pos, num_drafts, strict=True)
    )
    return accepted / attempts if attempts > 0 else float("nan")


def steps_to_emit(rates: ArrayLike, max_tokens: int) -> np.ndarray:
    """Expected verify steps to emit m = 0..max_tokens tokens, conditional per-position
    acceptance a_1..a_K: a step emits j + 1 tokens with probability a_1..a_j (1 - a_(j+1))
    (a_(K+1) = 0), and the last step is cut at the output's end. For long outputs
    steps(m) / m -> 1 / E; a short output pays for a whole last step:
    steps(m) = 1 + sum_j P(j) steps(m - j - 1), steps(m <= 0) = 0. A NaN rate is a position
    no step reached (all rejected before it): none is accepted there."""
    rates = np.nan_to_num(np.asarray(rates, float), nan=0.0)
    reach = np.append(1.0, np.cumprod(rates))
    emits = reach * np.append(1.0 - rates, 1.0)  # P(a step accepts exactly j), j = 0..K
    steps = np.zeros(max_tokens + 1)
    for m in range(1, max_tokens + 1):
        before = steps[np.maximum(m - 1 - np.arange(len(emits)), 0)]
        steps[m] = 1.0 + float(emits @ before)
    return steps


def decode_steps(
    rates: ArrayLike, tokens: ArrayLike, undrafted: ArrayLike | None = None
) -> tuple[float, float]:
    """Verify steps and steps without drafts per decode token, each a mean over requests
    (TPOT is a mean over requests) of ``tokens`` decode tokens (output tokens - 1),
    ``undrafted`` of them emitted one a step without drafts (prompt lookup that found no
    match; none for a draft model): TPOT_i = (T_step steps(m_i - u_i) + T_u u_i) / m_i.
    Without undrafted steps the first is 1 / E for long outputs. NaN without a request of
    one decode token or more."""
    m = np.asarray(tokens, int)
    u = np.zeros_like(m) if undrafted is None else np.asarray(undrafted, int)
    keep = m > 0
    if not keep.any():
        return float("nan"), float("nan")
    m, u = m[keep], np.minimum(u[keep], m[keep])
    steps = steps_to_emit(rates, int(m.max()))
    return float(np.mean(steps[m - u] / m)), float(np.mean(u / m))


def speedup_from_costs(
    steps: ArrayLike,
    t_target: ArrayLike,
    t_step: ArrayLike,
    undrafted: ArrayLike = 0.0,
    t_undrafted: ArrayLike = 0.0,
) -> np.ndarray | float:
    """Predicted TPOT speedup: T_target over the predicted time per token, ``steps`` verify
    steps of T_step plus ``undrafted`` steps without drafts of ``t_undrafted`` per token
    (:func:`decode_steps`). Without undrafted steps: E x T_target / T_step."""
    undrafted = np.asarray(undrafted, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(undrafted > 0, undrafted * np.asarray(t_undrafted, float), 0.0)
        steps = np.asarray(steps, float)  # no verify step costs 0 even when unpriced
        tpot = np.where(steps == 0, 0.0, steps * np.asarray(t_step, float)) + rest
        return _out(np.asarray(np.asarray(t_target, float) / tpot))


class CostPrediction(NamedTuple):
    """One row of the cost model (:func:`predict_from_costs`); arrays when its inputs are."""

    c: np.ndarray | float  # T_draft / T_target, both calibrated per token at K = 0
    e: np.ndarray | float  # decode tokens per verify step, 1 / steps
    t_step: np.ndarray | float  # the calibrated seconds of one verify step
    speedup: np.ndarray | float  # E x T_target / T_step (:func:`speedup_from_costs`)
    speedup_simple: np.ndarray | float  # E / (K c + 1), in target tokens


def predict_from_costs(
    steps: ArrayLike,
    t_target: ArrayLike,
    t_step: ArrayLike,
    t_draft: ArrayLike = np.nan,
    t_plain: ArrayLike = np.nan,
    k: ArrayLike = np.nan,
    undrafted: ArrayLike = 0.0,
    t_undrafted: ArrayLike = 0.0,
) -> CostPrediction:
    """The cost model's prediction for a row from its calibrated costs: ``steps`` verify
    steps and ``undrafted`` steps without drafts per decode token (:func:`decode_steps`,
    or a pre-flight replay), ``t_target`` the target's time per token the speedup is
    against, ``t_step`` one verify step, ``t_draft`` and ``t_plain`` the draft's and the
    plain target's calibrated time per token (for c), ``k`` the drafts per verify step
    (for the simple model, whose steps without drafts cost one target token each) and
    ``t_undrafted`` a step without drafts. Without ``t_draft``, c and the simple model
    are NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.asarray(t_draft, float) / np.asarray(t_plain, float)
        e = 1.0 / np.asarray(steps, float)
        simple_step = np.asarray(k, float) * c + 1.0
    return CostPrediction(
        c=_out(c),
        e=_out(e),
        t_step=_out(np.asarray(t_step, float)),
        speedup=speedup_from_costs(steps, t_target, t_step, undrafted, t_undrafted),
        speedup_simple=speedup_from_costs(steps, 1.0, simple_step, undrafted, 1.0),
    )
