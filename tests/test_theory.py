"""The analytical model of speculative decoding against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from reports import theory


def test_expected_tokens_matches_hand_computed_values():
    # (1 - 0.8^6) / 0.2 = (1 - 0.262144) / 0.2 = 3.68928
    assert theory.expected_tokens(0.8, 5) == pytest.approx(3.68928)
    # (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616
    assert theory.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert round(theory.expected_tokens(0.8, 5), 2) == 3.69


def test_predicted_speedup_matches_hand_computed_value():
    # E = 3.3616 tokens per step for a step costing 4 * 0.05 + 1 = 1.2 target forwards
    assert theory.predicted_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert round(theory.predicted_speedup(0.8, 4, 0.05), 2) == 2.80


def test_expected_tokens_edges_are_k_plus_one_and_one():
    ks = np.arange(8)
    assert np.array_equal(theory.expected_tokens(1.0, ks), ks + 1.0)
    assert np.array_equal(theory.expected_tokens(0.0, ks), np.ones(8))
    assert theory.predicted_speedup(0.7, 0, 0.3) == 1.0  # K = 0 is plain decoding


def test_functions_broadcast_over_arrays():
    a = np.array([0.6, 0.7, 0.8])[:, None]
    k = np.array([1, 3, 5])[None, :]
    e = theory.expected_tokens(a, k)
    assert e.shape == (3, 3)
    assert e[2, 2] == pytest.approx(3.68928)
    assert isinstance(theory.expected_tokens(0.5, 2), float)


def test_modelled_acceptance_is_accepted_over_proposed_under_the_model():
    # K = 2: accepted drafts per step a + a^2, over 2 proposed
    assert theory.modelled_acceptance(0.6, 2) == pytest.approx((0.6 + 0.36) / 2)


def test_break_even_cost_gives_speedup_one():
    for a, k in [(0.6, 3), (0.8, 5), (0.9, 7)]:
        c = theory.break_even_cost(a, k)
        assert theory.predicted_speedup(a, k, c) == pytest.approx(1.0)
        assert theory.predicted_speedup(a, k, c * 0.9) > 1 > theory.predicted_speedup(a, k, c * 1.1)


@pytest.mark.parametrize("a, c", [(0.6, 0.1), (0.8, 0.05), (0.9, 0.02), (0.95, 0.2), (0.7, 0.5)])
def test_best_k_is_the_argmax_of_predicted_speedup(a, c):
    ks = np.arange(theory.K_MAX + 1)
    brute = int(np.argmax([theory.predicted_speedup(a, k, c) for k in ks]))
    assert theory.best_k(a, c) == brute


def test_best_k_is_zero_when_drafting_never_pays():
    assert theory.best_k(0.2, 0.9) == 0
    assert (
        theory.best_k(0.8, 0.05) == 8
    )  # E/(Kc+1): K=8 4.329/1.40 = 3.092 > K=9 4.463/1.45 = 3.078


def test_best_k_grid_matches_scalar_calls():
    a, c = np.meshgrid([0.6, 0.8, 0.9], [0.02, 0.1, 0.3])
    grid = theory.best_k(a, c)
    assert grid.shape == (3, 3)
    assert all(grid[i, j] == theory.best_k(a[i, j], c[i, j]) for i in range(3) for j in range(3))


def test_alpha_mle_recovers_a_from_exact_geometric_counts_pooled_over_runs():
    a, steps = 0.7, 10_000
    per_pos = {k: steps * a ** np.arange(1, k + 1) for k in (1, 5)}  # accepted positions 1..i
    assert theory.alpha_mle([per_pos[5]], [steps]) == pytest.approx(a)
    assert theory.alpha_mle(list(per_pos.values()), [steps, steps]) == pytest.approx(a)
    assert theory.position_attempts(per_pos[5], steps) == pytest.approx(
        steps + per_pos[5][:-1].sum()
    )
    # pooled: the runs' accepted over their attempts, not a mean of per-run estimates
    few = [0.5 * 10]  # 10 steps at K = 1 accepting half
    assert theory.alpha_mle([per_pos[1], few], [steps, 10]) == pytest.approx(
        (per_pos[1][0] + 5) / (steps + 10)
    )
    assert np.isnan(theory.alpha_mle([[0, 0]], [0]))
    assert np.isnan(theory.alpha_mle([], []))


def test_per_position_rates_give_tokens_per_step_on_long_outputs():
    m = 20_000
    # flat rates: the geometric model, E = 3.68928
    assert theory.steps_to_emit([0.8] * 5, m)[-1] / m == pytest.approx(1 / 3.68928, rel=1e-3)
    # falling rates: E = 1 + 0.9 + 0.9 * 0.5 + 0.9 * 0.5 * 0.2 = 2.44
    assert theory.steps_to_emit([0.9, 0.5, 0.2], m)[-1] / m == pytest.approx(1 / 2.44, rel=1e-3)


def test_speedup_from_costs_is_tokens_per_step_times_target_time_over_step_time():
    # 2.5 tokens per 6 ms step against 3 ms per token: 1.25x
    assert theory.speedup_from_costs(1 / 2.5, 0.003, 0.006) == pytest.approx(1.25)
    # a step costing K c + 1 target tokens gives back the simple model
    a, k, c, t = 0.75, 3, 0.12, 0.01
    e = theory.expected_tokens(a, k)
    assert theory.speedup_from_costs(1 / e, t, t * (k * c + 1)) == pytest.approx(
        theory.predicted_speedup(a, k, c)
    )
    # no undrafted steps: their cost, even unknown, does not enter
    assert theory.speedup_from_costs(1 / 2.5, 0.003, 0.006, 0.0, np.nan) == pytest.approx(1.25)
    # no verify steps (a K schedule at K = 0 throughout): neither does an unknown step time
    assert theory.speedup_from_costs(0.0, 0.003, np.nan, 1.0, 0.004) == pytest.approx(0.75)
    assert np.isnan(theory.speedup_from_costs(np.nan, 0.003, 0.006))  # unknown steps stay so


def test_one_assembly_gives_a_rows_c_e_step_time_and_predicted_speedups():
    # a replay of 0.4 verify steps per decode token (E = 2.5) at K = 2, the target at
    # 10 ms per token, a verify step at 16 ms, the draft alone at 3 ms per token
    steps, t_target, t_step, t_draft, k = 0.4, 0.010, 0.016, 0.003, 2
    model = theory.predict_from_costs(steps, t_target, t_step, t_draft, t_target, k)
    assert model.e == pytest.approx(1 / steps)
    assert model.c == pytest.approx(t_draft / t_target)
    assert model.t_step == t_step
    assert model.speedup == pytest.approx(steps**-1 * t_target / t_step)  # 1.5625
    assert model.speedup_simple == pytest.approx(steps**-1 / (k * t_draft / t_target + 1))
    # steps without drafts: each emits one token at its own time; the simple model
    # charges it one target token
    undrafted, t_undrafted = 0.2, 0.011
    model = theory.predict_from_costs(
        steps, t_target, t_step, t_draft, t_target, k, undrafted, t_undrafted
    )
    assert model.speedup == pytest.approx(t_target / (steps * t_step + undrafted * t_undrafted))
    assert model.speedup_simple == pytest.approx(
        1 / (steps * (k * t_draft / t_target + 1) + undrafted)
    )
    # without a draft timed alone (a head): no c and no simple model, the cost model stands
    head = theory.predict_from_costs(steps, t_target, t_step)
    assert np.isnan(head.c) and np.isnan(head.speedup_simple)
    assert head.speedup == pytest.approx(steps**-1 * t_target / t_step)
    # rows broadcast as arrays (the report's columns)
    rows = theory.predict_from_costs([0.4, 0.5], t_target, [0.016, 0.02], t_draft, t_target, k)
    assert rows.speedup == pytest.approx([2.5 * 10 / 16, 2 * 10 / 20])


def test_steps_without_drafts_emit_one_token_at_their_own_cost():
    # prompt lookup drafted for 60 of 100 decode tokens, every draft accepted at K = 2
    # (three tokens a verify step: 20 steps), and found no match for the other 40
    steps, undrafted = theory.decode_steps([1.0, 1.0], [100], [40])
    assert (steps, undrafted) == pytest.approx((20 / 100, 40 / 100))
    # 20 verify steps of 9 ms and 40 plain steps of 4 ms against 100 tokens of 4 ms
    expected = 100 * 0.004 / (20 * 0.009 + 40 * 0.004)
    assert theory.speedup_from_costs(steps, 0.004, 0.009, undrafted, 0.004) == pytest.approx(
        expected
    )
    # a request that never drafted decodes as plain decoding does
    steps, undrafted = theory.decode_steps([0.7, 0.5], [30], [30])
    assert theory.speedup_from_costs(steps, 0.004, 0.009, undrafted, 0.004) == pytest.approx(1)


def test_a_short_output_pays_for_a_whole_last_step():
    # every draft accepted, K = 2: three tokens a step, the last step cut at the end
    assert theory.steps_to_emit([1.0, 1.0], 7).tolist() == [0, 1, 1, 1, 2, 2, 2, 3]
    # no draft accepted: one token a step
    assert theory.steps_to_emit([0.0, 0.0], 4).tolist() == [0, 1, 2, 3, 4]
    # long outputs reach E; a 16-token answer at a = 0.8, K = 5 gets about 10% less
    e = theory.expected_tokens(0.8, 5)
    assert 1 / theory.decode_steps([0.8] * 5, [20_000])[0] == pytest.approx(e, rel=1e-3)
    assert 1 / theory.decode_steps([0.8] * 5, [16])[0] == pytest.approx(0.895 * e, rel=1e-3)
    # TPOT is a mean over requests: mean(steps / tokens), not pooled steps / tokens
    assert theory.decode_steps([1.0], [2, 3]) == pytest.approx(((1 / 2 + 2 / 3) / 2, 0))
    assert np.isnan(theory.decode_steps([0.5], [0])[0])
