"""Pre-flight acceptance: the greedy step replay, and its estimate against a real run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from harness import engine as engines
from harness import preflight, results
from harness.config import compose_config
from harness.preflight import greedy_steps, replay


def test_a_step_ends_at_the_first_disagreement_and_adds_one_token():
    # output tokens 1..7: agree, agree, no, agree, agree, agree, agree
    agree = [True, True, False, True, True, True, True]
    # K=3: accept 2, target corrects token 3; accept 3 (tokens 4-6), bonus token 7; done
    assert greedy_steps(agree, 3) == [2, 3]
    # K=1: 1 (+1), then token 3 disagrees: 0 (+1), then 1, 1: tokens 4..7
    assert greedy_steps(agree, 1) == [1, 0, 1, 1]


def test_a_step_at_the_end_accepts_at_most_the_tokens_left():
    assert greedy_steps([True, True], 5) == [2]
    assert greedy_steps([], 3) == []


def test_replay_counts_steps_drafts_and_per_position_acceptance():
    counts = replay([True, True, False, True, True, True, True], 3)
    assert counts.num_steps == 2
    assert counts.num_draft_tokens == 6
    assert counts.num_accepted_tokens == 5
    assert counts.accepted_per_pos == (2, 2, 1)


def test_without_any_agreement_every_step_emits_one_token():
    assert greedy_steps([False] * 4, 3) == [0, 0, 0, 0]


@pytest.mark.slow
def test_estimate_equals_the_measured_greedy_acceptance(tiny_pair, tmp_path):
    target, draft = tiny_pair
    common = [f"models.targets.cot={target}", f"models.drafts.cot={draft}",
              f"results_dir={tmp_path}", "limit=6", "max_tokens=40"]  # fmt: skip
    from harness.job import run_job

    engines.clear()
    try:
        base_cfg = compose_config([*common, "variant=cot", "spec.k=0"])
        run_job(base_cfg, progress=False)
        measured = {}
        for k in (1, 3):
            cfg = compose_config([*common, "variant=cot_sd", f"spec.k={k}"])
            run_job(cfg, progress=False)
            measured[k] = json.loads(
                (results.sweep_dir(cfg) / results.job_name(cfg) / results.SUMMARY).read_text()
            )["spec"]
    finally:
        engines.clear()
    base_dir = results.sweep_dir(base_cfg) / results.job_name(base_cfg)
    estimate = preflight.estimate(base_dir, str(draft), [1, 3])
    for k in (1, 3):
        got = estimate["ks"][str(k)]
        assert 0 < measured[k]["num_accepted_tokens"] < measured[k]["num_draft_tokens"]
        for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos"):
            assert got[key] == measured[k][key], (k, key)
    assert pq.read_table(base_dir / results.REQUESTS).num_rows == 6
