"""The Monte Carlo of speculative decoding: the accept/reject rule is exact and the
simulated laws match the analytical model. Fixed seeds; the bounds (chi-square at 99.9%,
a few standard errors) are ones a wrong rule fails, as the negative controls show."""

from __future__ import annotations

import argparse

import matplotlib.image as mpimg
import numpy as np
import pytest

from reports import simulate, simulation_report, theory, theory_figures

N = 200_000


def _pair(case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    p, q = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    if case == "q zero where p positive":
        q[:3] = 0.0
    elif case == "p zero where q positive":
        p[:3] = 0.0
    elif case == "p equals q":
        q = p.copy()
    return p / p.sum(), q / q.sum()


def _fits(tokens: np.ndarray, p: np.ndarray) -> bool:
    stat, dof = simulate.chi_square(tokens, p)
    return stat < simulate.chi_square_critical(dof)


CASES = ["random", "q zero where p positive", "p zero where q positive", "p equals q"]


@pytest.mark.parametrize("case", CASES)
def test_emitted_tokens_are_distributed_as_the_target(case):
    rng = np.random.default_rng(1)
    p, q = _pair(case, rng)
    tokens, _ = simulate.rejection_sample(p, q, N, rng)
    assert _fits(tokens, p)
    assert simulate.total_variation(tokens, p) < 0.01


@pytest.mark.parametrize("case", CASES)
def test_acceptance_is_the_overlap_of_p_and_q(case):
    rng = np.random.default_rng(2)
    p, q = _pair(case, rng)
    a = simulate.acceptance_probability(p, q)
    _, accepted = simulate.rejection_sample(p, q, N, rng)
    se = np.sqrt(max(a * (1 - a), 1e-12) / N)
    assert abs(accepted.mean() - a) < 4 * se + 1e-12


@pytest.mark.parametrize("case", CASES)
def test_greedy_drafting_accepts_with_the_target_probability_of_the_draft_argmax(case):
    rng = np.random.default_rng(6)
    p, q = _pair(case, rng)
    a = p[np.argmax(q)]
    assert simulate.acceptance_probability(p, q, "greedy") == pytest.approx(a)
    tokens, accepted = simulate.rejection_sample(p, q, N, rng, "greedy")
    se = np.sqrt(max(a * (1 - a), 1e-12) / N)
    assert abs(accepted.mean() - a) < 4 * se + 1e-12
    assert set(tokens[accepted]) <= {int(np.argmax(q))}  # only the argmax is ever proposed
    assert _fits(tokens, p)  # still lossless
    if case == "random":  # sampling from q would accept sum min(p, q) instead
        assert abs(simulate.acceptance_probability(p, q) - a) > 10 * se


def test_greedy_tokens_per_step_follow_the_formula_with_a_of_the_argmax():
    table = simulate.tokens_per_step_table((0.6, 0.8), (1, 3, 5), 40_000, 0, "greedy")
    z = (table["simulated"] - table["analytical"]) / table["se"]
    assert (z.abs() < 4).all(), table
    p, q = simulate.toy_pair(0.6, 8, np.random.default_rng(0), "greedy")
    assert simulate.acceptance_probability(p, q, "greedy") == pytest.approx(0.6)
    assert simulate.acceptance_probability(p, q) != pytest.approx(0.6)
    with pytest.raises(ValueError, match="draft_sample_method='typo'"):
        simulate.proposal(q, "typo")


def test_identical_draft_is_always_accepted():
    rng = np.random.default_rng(3)
    p, q = _pair("p equals q", rng)
    _, accepted = simulate.rejection_sample(p, q, 10_000, rng)
    assert accepted.all()


def test_wrong_rules_are_caught_by_the_same_bounds(monkeypatch):
    rng = np.random.default_rng(4)
    p, q = _pair("random", rng)
    drafts = simulate.sample(q, N, rng)
    assert not _fits(drafts, p)  # always accepting emits q, not p
    # resampling from p itself instead of the residual max(0, p - q) double-counts overlap
    monkeypatch.setattr(simulate, "residual", lambda p, q: p)
    tokens, _ = simulate.rejection_sample(p, q, N, rng)
    assert not _fits(tokens, p)


def test_every_token_of_a_multi_draft_step_is_distributed_as_the_target():
    rng = np.random.default_rng(5)
    p, q = _pair("random", rng)
    steps = simulate.speculative_steps(p, q, 4, 50_000, rng)
    assert len(steps.emitted) == steps.tokens_per_step.sum()
    assert _fits(steps.emitted, p)


def test_toy_pair_has_the_requested_acceptance():
    p, q = simulate.toy_pair(0.73, 8, np.random.default_rng(0))
    assert simulate.acceptance_probability(p, q) == pytest.approx(0.73)
    assert p.sum() == pytest.approx(1) and q.sum() == pytest.approx(1)


def test_mean_tokens_per_step_follows_the_formula():
    table = simulate.tokens_per_step_table(simulate.ALPHAS, simulate.KS, 40_000, seed=0)
    z = (table["simulated"] - table["analytical"]) / table["se"]
    assert (z.abs() < 4).all(), table
    # counting all accepted drafts instead of the accepted prefix would overshoot E
    rng = np.random.default_rng(0)
    p, q = simulate.toy_pair(0.7, 8, rng)
    _, accepted = simulate.rejection_sample(p, q, (40_000, 5), rng)
    assert accepted.sum(axis=1).mean() + 1 > theory.expected_tokens(0.7, 5) + 0.2


def test_simulated_speedup_equals_e_over_step_cost():
    tokens = simulate.tokens_per_step_table((0.6, 0.8), (1, 3, 5, 7), 40_000, seed=1)
    s = simulate.speedup_table(tokens, simulate.COSTS)
    assert len(s) == len(tokens) * len(simulate.COSTS)
    assert ((s["simulated"] - s["analytical"]).abs() < 4 * s["se"] + 1e-12).all()


def test_simulated_best_k_matches_the_analytical_argmax():
    grid = simulate.tokens_per_step_table(
        simulate.GRID_ALPHAS, tuple(range(theory.K_MAX + 1)), 20_000, seed=2
    )
    best = simulate.best_k_table(simulate.speedup_table(grid, simulate.GRID_COSTS))
    agree = (best["best_k_simulated"] == best["best_k_analytical"]).mean()
    assert agree >= 0.9
    assert best["regret"].max() < 0.005  # disagreements are near-ties only


def test_same_seed_gives_the_same_simulation():
    a, b = simulate.run(2_000, seed=7), simulate.run(2_000, seed=7)
    assert a.tokens.equals(b.tokens) and a.best_k.equals(b.best_k) and a.rules.equals(b.rules)


def test_cli_writes_figures_and_markdown(tmp_path):
    args = argparse.Namespace(out=tmp_path, steps=3_000, seed=0, draft_sample_method="greedy")
    path = simulation_report.main(args)
    text = path.read_text()
    assert "draft sampling `greedy`" in text
    assert "| random p, q | greedy |" in text and "| random p, q | probabilistic |" in text
    assert "| a | K=3 | K=5 | K=7 |" in text
    assert "Break-even" in text
    for name, _, _ in theory_figures.SIM_FIGURES:
        png = tmp_path / "figures" / f"{name}.png"
        assert png.is_file()
        assert mpimg.imread(png)[..., :3].std() > 0.05  # not blank
        assert f"figures/{name}.png" in text
