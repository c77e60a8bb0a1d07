"""Monte Carlo of draft-model speculative decoding, checked against :mod:`reports.theory`.

The accept/reject rule (Leviathan et al. 2023, alg. 1; Chen et al. 2023) in a context-free
toy world, for both ways of drafting (:data:`METHODS`); vectorised with numpy and seeded.
The rule and the world: docs/METRICS.md. Compute only; ``python -m
reports.simulation_report`` draws and writes the results.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports import theory

ALPHAS = (0.6, 0.7, 0.8, 0.9)  # the exercises' acceptance rates
KS = (3, 5, 7)  # the exercises' draft lengths
COSTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)  # draft / target cost ratios
GRID_ALPHAS = tuple(np.round(np.arange(0.5, 0.951, 0.05), 2))  # best-K check grid
GRID_COSTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
VOCAB = 8  # tokens in each half of the toy vocabulary (see toy_pair)
METHODS = ("greedy", "probabilistic")  # how the draft proposes (vLLM's draft_sample_method)


def proposal(q: np.ndarray, method: str) -> np.ndarray:
    """What the draft proposes from: q itself, or one-hot at argmax q when greedy."""
    if method not in METHODS:
        raise ValueError(f"draft_sample_method={method!r}: use one of {', '.join(METHODS)}")
    return q if method == "probabilistic" else np.eye(len(q))[int(np.argmax(q))]


def sample(
    weights: np.ndarray, size: int | tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """Token ids drawn from unnormalised ``weights`` by inverse CDF (zero weight: never)."""
    cdf = np.cumsum(weights)
    idx = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    return np.minimum(idx, len(weights) - 1)


def acceptance_probability(p: np.ndarray, q: np.ndarray, method: str = "probabilistic") -> float:
    """Probability that one draft token is accepted: a = sum_x min(p(x), q(x)), with q
    one-hot when greedy (a = p(argmax q))."""
    return float(np.minimum(p, proposal(q, method)).sum())


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The distribution a rejection samples from: max(0, p - q), normalised.

    When p = q nothing is ever rejected and the residual is empty; p is returned so the
    vectorised sampler stays defined.
    """
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p


def rejection_sample(
    p: np.ndarray,
    q: np.ndarray,
    size: int | tuple[int, ...],
    rng: np.random.Generator,
    method: str = "probabilistic",
) -> tuple[np.ndarray, np.ndarray]:
    """One draft position, ``size`` times: (emitted token, whether the draft was accepted)."""
    q = proposal(q, method)
    drafts = sample(q, size, rng)
    accepted = rng.random(size) * q[drafts] < p[drafts]  # u < min(1, p/q), with q(x) > 0
    corrections = sample(residual(p, q), size, rng)
    return np.where(accepted, drafts, corrections), accepted


@dataclass(frozen=True)
class Steps:
    """Simulated verify steps: tokens emitted per step, and every emitted token."""

    tokens_per_step: np.ndarray  # (n_steps,) accepted drafts + 1
    emitted: np.ndarray  # all emitted token ids, in no particular order


def speculative_steps(
    p: np.ndarray,
    q: np.ndarray,
    k: int,
    n_steps: int,
    rng: np.random.Generator,
    method: str = "probabilistic",
) -> Steps:
    """Simulate ``n_steps`` verify steps with ``k`` drafts each.

    A step keeps the drafts up to the first rejection, then emits the correction drawn at
    that position, or a bonus token from p when all k passed.
    """
    tokens, accepted = rejection_sample(p, q, (n_steps, k), rng, method)
    n_accepted = np.cumprod(accepted, axis=1).sum(axis=1)
    with_bonus = np.concatenate([tokens, sample(p, (n_steps, 1), rng)], axis=1)
    last = with_bonus[np.arange(n_steps), n_accepted]  # the correction, or the bonus
    kept = tokens[np.arange(k)[None, :] < n_accepted[:, None]]
    return Steps(tokens_per_step=n_accepted + 1, emitted=np.concatenate([kept, last]))


def toy_pair(
    a: float, vocab: int, rng: np.random.Generator, method: str = "probabilistic"
) -> tuple[np.ndarray, np.ndarray]:
    """A random target p and draft q with acceptance exactly ``a`` under ``method``.

    Probabilistic: p lives on the first ``vocab`` tokens, q = a p + (1 - a) r with r on
    the other ``vocab`` tokens, so sum min(p, q) = a. Greedy: p(0) = a and the rest of p
    on tokens 1..vocab-1; q = (one-hot at 0 + r) / 2, so argmax q = 0 and p(argmax q) = a.
    """
    r = np.concatenate([np.zeros(vocab), rng.dirichlet(np.ones(vocab))])
    if method == "greedy":
        rest = (1.0 - a) * rng.dirichlet(np.ones(vocab - 1))
        return np.concatenate([[a], rest, np.zeros(vocab)]), (np.eye(2 * vocab)[0] + r) / 2
    p = np.concatenate([rng.dirichlet(np.ones(vocab)), np.zeros(vocab)])
    return p, a * p + (1.0 - a) * r


def total_variation(tokens: np.ndarray, p: np.ndarray) -> float:
    """Total-variation distance between the empirical distribution of ``tokens`` and p."""
    freq = np.bincount(tokens, minlength=len(p)) / len(tokens)
    return 0.5 * float(np.abs(freq - p).sum())


def chi_square(tokens: np.ndarray, p: np.ndarray) -> tuple[float, int]:
    """Pearson's chi-square of ``tokens`` against p over p's support, and its dof.

    A token outside p's support makes the statistic infinite.
    """
    counts = np.bincount(tokens, minlength=len(p))
    support = p > 0
    if counts[~support].any():
        return float("inf"), int(support.sum()) - 1
    expected = p[support] * len(tokens)
    return float(((counts[support] - expected) ** 2 / expected).sum()), int(support.sum()) - 1


def chi_square_critical(dof: int, z: float = 3.09) -> float:
    """Upper chi-square quantile by Wilson-Hilferty; z = 3.09 gives the 99.9% point."""
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * np.sqrt(h)) ** 3


def rule_checks(n: int, seed: int) -> pd.DataFrame:
    """The accept/reject rule on toy pairs under both :data:`METHODS`: acceptance and
    emitted distribution vs theory."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(12))
    cases = {
        "random p, q": (p, rng.dirichlet(np.ones(12))),
        "q = 0 where p > 0": (p, np.where(np.arange(12) < 4, 0.0, rng.dirichlet(np.ones(12)))),
        "p = 0 where q > 0": (np.where(np.arange(12) < 4, 0.0, p), rng.dirichlet(np.ones(12))),
        "p = q": (p, p.copy()),
    }
    rows = []
    for (name, (target, draft)), method in itertools.product(cases.items(), METHODS):
        target, draft = target / target.sum(), draft / draft.sum()
        tokens, accepted = rejection_sample(target, draft, n, rng, method)
        stat, dof = chi_square(tokens, target)
        rows.append(
            {
                "case": name,
                "method": method,
                "acceptance_theory": acceptance_probability(target, draft, method),
                "acceptance_simulated": float(accepted.mean()),
                "tv_distance": total_variation(tokens, target),
                "chi_square": stat,
                "chi_square_999": chi_square_critical(dof),
            }
        )
    return pd.DataFrame(rows)


def tokens_per_step_table(
    alphas: tuple[float, ...],
    ks: tuple[int, ...],
    n_steps: int,
    seed: int,
    method: str = "probabilistic",
) -> pd.DataFrame:
    """Simulated mean tokens per step (with its standard error) against E(a, K).

    One simulation with max(ks) drafts per step serves every K (common random numbers):
    a step with K drafts is the same step cut after K drafts, min(accepted, K) + 1 tokens.
    Differences between Ks are then measured almost without noise, so the simulated best K
    is comparable with the analytical one.
    """
    rows = []
    for i, a in enumerate(alphas):
        rng = np.random.default_rng([seed, i])
        p, q = toy_pair(a, VOCAB, rng, method)
        accepted = speculative_steps(p, q, max(ks), n_steps, rng, method).tokens_per_step - 1
        for k in ks:
            t = np.minimum(accepted, k) + 1
            rows.append(
                {
                    "a": a,
                    "k": k,
                    "simulated": t.mean(),
                    "se": t.std(ddof=1) / np.sqrt(n_steps),
                    "analytical": theory.expected_tokens(a, k),
                }
            )
    return pd.DataFrame(rows)


def speedup_table(tokens: pd.DataFrame, costs: tuple[float, ...]) -> pd.DataFrame:
    """Simulated speedup E_sim / (K c + 1) against E / (K c + 1), per (a, K, c)."""
    t = tokens.merge(pd.DataFrame({"c": costs}), how="cross")
    step_cost = t["k"] * t["c"] + 1.0
    return pd.DataFrame(
        {
            "a": t["a"],
            "k": t["k"],
            "c": t["c"],
            "simulated": t["simulated"] / step_cost,
            "se": t["se"] / step_cost,
            "analytical": theory.predicted_speedup(t["a"], t["k"], t["c"]),
        }
    )


def best_k_table(speedups: pd.DataFrame) -> pd.DataFrame:
    """Per (a, c): the K with the highest simulated speedup and the analytical best K.

    ``regret`` is how much analytical speedup the simulated choice gives up (0 when they
    agree; sampling noise can only pick a K whose speedup is within a few SE of the best).
    """
    rows = []
    for (a, c), g in speedups.groupby(["a", "c"], sort=True):
        sim_k = int(g["k"].iloc[int(np.argmax(g["simulated"].to_numpy()))])
        k_max = int(g["k"].max())
        true_k = theory.best_k(a, c, k_max)
        rows.append(
            {
                "a": a,
                "c": c,
                "best_k_simulated": sim_k,
                "best_k_analytical": true_k,
                "regret": theory.predicted_speedup(a, true_k, c)
                - theory.predicted_speedup(a, sim_k, c),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Simulation:
    """Every table the simulator produces, and the exercises' acceptance rates and Ks."""

    rules: pd.DataFrame
    tokens: pd.DataFrame  # a in alphas, K = 0..8
    speedups: pd.DataFrame  # the same (a, K) over COSTS
    best_k: pd.DataFrame  # over GRID_ALPHAS x GRID_COSTS, K = 0..K_MAX
    alphas: tuple[float, ...]  # the acceptance rates of the tables and figures
    ks: tuple[int, ...]  # the draft lengths the report tabulates
    method: str  # draft sampling of the tokens, speedup and best-K tables (METHODS)


def run(n_steps: int, seed: int, method: str = "greedy") -> Simulation:
    """Run every exercise with ``n_steps`` verify steps per (a, K), drafting by ``method``
    (the rule checks cover both)."""
    tokens = tokens_per_step_table(ALPHAS, tuple(range(9)), n_steps, seed, method)
    grid = tokens_per_step_table(
        GRID_ALPHAS, tuple(range(theory.K_MAX + 1)), n_steps, seed + 1, method
    )
    return Simulation(
        rules=rule_checks(20 * n_steps, seed),
        tokens=tokens,
        speedups=speedup_table(tokens, COSTS),
        best_k=best_k_table(speedup_table(grid, GRID_COSTS)),
        alphas=ALPHAS,
        ks=KS,
        method=method,
    )
