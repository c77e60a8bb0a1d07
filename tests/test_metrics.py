"""Metric definitions: TPOT, acceptance, counters, rejection positions."""

from __future__ import annotations

import pytest

from harness import metrics
from harness.metrics import SpecCounts


def test_tpot_is_decode_time_over_tokens_after_the_first():
    assert metrics.tpot(decode_s=0.8, output_tokens=5) == pytest.approx(0.2)


@pytest.mark.parametrize("tokens", [0, 1])
def test_tpot_is_none_for_outputs_shorter_than_two_tokens(tokens):
    assert metrics.tpot(0.8, tokens) is None


def test_acceptance_rate_is_accepted_over_drafted():
    assert metrics.acceptance_rate(3, 4) == 0.75


def test_acceptance_rate_is_none_when_nothing_was_drafted():
    assert metrics.acceptance_rate(0, 0) is None


def test_mean_acceptance_length_counts_the_bonus_token():
    assert metrics.mean_acceptance_length(accepted=6, steps=4) == 2.5
    assert metrics.mean_acceptance_length(0, 0) is None


def test_histogram_gives_steps_accepted_tokens_and_acceptance_per_position():
    # 3 steps accepted nothing, 1 accepted one draft, 2 accepted all three (K = 3)
    counts = metrics.counts_from_histogram([3, 1, 0, 2], num_draft_tokens=18)
    assert counts == SpecCounts(6, 18, 1 + 6, (3, 2, 2))


def test_position_counts_give_steps_reaching_and_accepting_each_position():
    # steps accepting at least j drafts: 6, 3, 2, 2 and 1, 1, 1, 1
    reached, accepted = metrics.position_counts([[3, 1, 0, 2], [0, 0, 0, 1]])
    assert reached.tolist() == [[6, 3, 2], [1, 1, 1]]
    assert accepted.tolist() == [[3, 2, 2], [1, 1, 1]]


def test_total_counts_sums_requests_position_by_position():
    total = metrics.total_counts([SpecCounts(2, 4, 3, (2, 1)), SpecCounts(1, 2, 0, (0, 0))])
    assert total == SpecCounts(3, 6, 3, (2, 1))


def _snapshot(drafts, drafted, accepted, per_pos, engine="0"):
    from vllm.v1.metrics.reader import Counter, Gauge, Vector  # here: vLLM is slow to import

    labels = {"model_name": "m", "engine": engine}
    return [
        Counter(metrics.NUM_DRAFTS, labels, drafts),
        Counter(metrics.NUM_DRAFT_TOKENS, labels, drafted),
        Counter(metrics.NUM_ACCEPTED, labels, accepted),
        Vector(metrics.ACCEPTED_PER_POS, labels, per_pos),
        Gauge("vllm:num_requests_running", labels, 0.0),
    ]


def test_snapshot_counters_are_summed_over_engines():
    snapshot = _snapshot(2, 6, 4, [2, 1, 1]) + _snapshot(1, 3, 3, [1, 1, 1], engine="1")
    assert metrics.counts_from_snapshot(snapshot) == SpecCounts(3, 9, 7, (3, 2, 2))


def test_snapshot_without_spec_counters_is_none():
    from vllm.v1.metrics.reader import Gauge

    assert metrics.counts_from_snapshot([Gauge("vllm:num_requests_running", {}, 1.0)]) is None


def test_counter_delta_subtracts_the_reading_before_the_job():
    before = metrics.counts_from_snapshot(_snapshot(10, 30, 20, [9, 6, 5]))
    after = metrics.counts_from_snapshot(_snapshot(14, 42, 25, [12, 7, 6]))
    assert metrics.counts_delta(before, after) == SpecCounts(4, 12, 5, (3, 1, 1))


def test_counter_mismatch_names_the_field_that_differs():
    per_request = SpecCounts(4, 12, 5, (3, 1, 1))
    assert metrics.counter_mismatch(per_request, per_request) is None
    message = metrics.counter_mismatch(per_request, SpecCounts(4, 12, 6, (3, 2, 1)))
    assert "num_accepted_tokens: requests 5 vs engine 6" in message
    assert "num_steps" not in message


def test_rejected_positions_point_at_the_targets_correction_token():
    # prefill emits token 0; step 1 accepts 2 of 2 (tokens 1-3); step 2 accepts 0 (token 4
    # is the correction); step 3 accepts 1 of 2 (tokens 5-6, 6 is the correction)
    assert metrics.rejected_positions([2, 0, 1], [2, 2, 2], num_output_tokens=7) == [4, 6]


def test_rejected_positions_skip_a_last_step_cut_by_the_stop_condition():
    assert metrics.rejected_positions([2, 1], [2, 2], num_output_tokens=5) == []


def test_rejected_positions_are_unknown_when_draftless_steps_emitted_unplaced_tokens():
    # prefill, a draftless step (token 1, not recorded), then the recorded steps: accepts
    # 0 of 2 (token 2 is the correction), accepts 1 of 2 (tokens 3-4, 4 is the correction).
    # Counting only recorded steps would name tokens 1 and 3: wrong tokens, not unknown.
    assert metrics.rejected_positions([0, 1], [2, 2], num_output_tokens=5) is None
    # nothing rejected: no positions to place, whatever the draftless steps
    assert metrics.rejected_positions([2, 2], [2, 2], num_output_tokens=9) == []


def test_acceptance_by_third_charges_each_step_to_the_third_it_starts_in():
    # 12 tokens: prefill (0), steps starting at 1 (accepts 2 of 3: tokens 1-3), 4 (3 of 3:
    # 4-7), 8 (0 of 3: 8), 9 (2 of 3: 9-11); thirds start at 0, 4 and 8
    thirds = metrics.acceptance_by_third([2, 3, 0, 2], [3, 3, 3, 3], num_output_tokens=12)
    assert thirds == ((2, 3, 2), (3, 3, 6))
    # a last step cut by the stop condition still starts inside the answer
    assert metrics.acceptance_by_third([2, 3], [3, 3], num_output_tokens=5) == (
        (2, 0, 3),
        (3, 0, 3),
    )


def test_acceptance_by_third_is_unknown_when_steps_without_drafts_emitted_tokens():
    # 9 tokens but prefill + recorded steps emit 1 + 3 + 1 = 5: four steps had no drafts
    assert metrics.acceptance_by_third([2, 0], [3, 3], num_output_tokens=9) is None


def test_output_hash_is_equal_exactly_for_equal_token_ids():
    assert metrics.output_hash([1, 2, 3]) == metrics.output_hash((1, 2, 3))
    assert metrics.output_hash([1, 2, 3]) != metrics.output_hash([1, 23])


def test_spec_block_of_the_summary_derives_both_rates():
    row = SpecCounts(4, 8, 6, (4, 2)).to_row()
    assert row["acceptance_rate"] == 0.75
    assert row["mean_acceptance_length"] == 2.5
    assert row["accepted_per_pos"] == [4, 2]
