"""Pre-flight acceptance: the greedy step replay, and its estimate against a real run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import results
from harness.backends import engine as engines
from harness.config import compose_config
from harness.measure import preflight
from harness.measure.preflight import greedy_steps, replay


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


def test_a_step_crossing_the_end_counts_the_agreement_past_it():
    # 2 decode positions, then the target's continuation: agree, agree, no
    agree = [True, True, True, True, False]
    assert greedy_steps(agree, 5, end=2) == [4]  # tokens 1-2 and 2 drafts past the end
    assert greedy_steps(agree, 1, end=2) == [1]  # the bonus token completes the output
    assert greedy_steps([True, True], 5, end=2) == [2]  # nothing known past the end


def test_reaches_end_when_the_last_step_has_drafts_to_spare():
    assert preflight.reaches_end([True, True], 5)  # accepted both tokens left, 2 < 5
    assert not preflight.reaches_end([True, False], 5)  # ended at a disagreement
    assert not preflight.reaches_end([True, True, True], 3)  # all K drafts inside the output
    assert not preflight.reaches_end([True, True, True, True], 3)  # last step: bonus only


def test_stored_vectors_join_the_agreement_past_the_end():
    result = {"agree": {"a": "101", "b": "11"}, "beyond": {"b": "10"}}
    assert preflight.stored(result) == [
        ([True, False, True], 3),
        ([True, True, True, False], 2),
    ]


def _histogram(steps: list[int], k: int) -> list[int]:
    return [steps.count(j) for j in range(k + 1)]


def _noisy_copy(model_dir: Path, out: Path, std: float, seed: int) -> Path:
    """``model_dir`` (tokenizer included) with seeded Gaussian noise added to every weight."""
    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(model_dir, out)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * std)
    model.save_pretrained(out)
    return out


def estimate_and_measure(
    target: Path, draft: Path, tmp_path: Path, ks: tuple[int, ...], variant: str = "cot_sd"
) -> tuple[dict, dict]:
    """The pre-flight estimate of ``draft`` (the speculator of ``variant``, a cot variant)
    from a K = 0 run, and the requests vLLM ran at each K (problem id -> acceptance
    histogram and drafted tokens)."""
    from harness.sweep.job import run_job

    key = compose_config([f"variant={variant}"]).variant.draft
    common = [f"models.targets.cot={target}", f"models.drafts.{key}={draft}",
              f"results_dir={tmp_path / 'results'}", "limit=6", "max_tokens=40",
              "calibrate=false", "pairing=sequential", "sentinel_requests=1"]  # fmt: skip
    engines.clear()
    try:
        base_cfg = compose_config([*common, "variant=cot", "spec.k=0"])
        run_job(base_cfg, progress=False)
        measured = {}
        for k in ks:
            cfg = compose_config([*common, f"variant={variant}", f"spec.k={k}"])
            run_job(cfg, progress=False)
            cols = ["problem_id", "acceptance_histogram", "num_draft_tokens"]
            path = results.sweep_dir(cfg) / results.job_name(cfg) / results.REQUESTS
            measured[k] = {
                r["problem_id"]: r for r in pq.read_table(path, columns=cols).to_pylist()
            }
    finally:
        engines.clear()
    base_dir = results.sweep_dir(base_cfg) / results.job_name(base_cfg)
    estimate = preflight.estimate(base_dir, str(draft), list(ks))
    assert json.loads(json.dumps(estimate)) == estimate  # what preflight.json holds
    assert len(estimate["agree"]) == 6
    return estimate, measured


def assert_replay_equals_vllm(estimate: dict, measured: dict) -> None:
    """Per request and K, the replayed steps equal vLLM's: count, drafts, histogram."""
    vectors = dict(zip(estimate["agree"], preflight.stored(estimate), strict=True))
    for k, requests in measured.items():
        accepted = 0
        for pid, (agree, end) in vectors.items():
            steps, got = greedy_steps(agree, k, end), requests[pid]
            assert got["num_draft_tokens"] == k * len(steps), (k, pid)
            assert got["acceptance_histogram"] == _histogram(steps, k), (k, pid)
            accepted += sum(steps)
        assert estimate["ks"][str(k)]["num_accepted_tokens"] == accepted


@pytest.mark.slow
def test_estimate_equals_the_measured_greedy_acceptance(tiny_pair, tmp_path):
    """A noisy target writes varied tokens and a lightly noisier copy of it agrees about
    half the time: per request, every verify step vLLM records equals the replay's."""
    target = _noisy_copy(tiny_pair[0], tmp_path / "target", 1.0, 0)
    draft = _noisy_copy(target, tmp_path / "draft", 0.05, 1)
    estimate, measured = estimate_and_measure(target, draft, tmp_path, (1, 3))
    assert_replay_equals_vllm(estimate, measured)
    rates = [estimate["ks"][k]["acceptance_rate"] for k in ("1", "3")]
    assert all(0 < r < 1 for r in rates), rates


@pytest.mark.slow
def test_drafts_verified_past_the_outputs_end_are_counted(tiny_pair, tmp_path):
    """The random pair repeats one token, so every draft is accepted; 40 tokens leave 39
    decode positions, and at K = 5 the last step (3 tokens left) verifies 2 drafts past
    the end, which vLLM counts and the target's continuation predicts."""
    estimate, measured = estimate_and_measure(*tiny_pair, tmp_path, (3, 5))
    assert len(estimate["beyond"]) == 6
    assert_replay_equals_vllm(estimate, measured)
    assert estimate["ks"]["5"]["num_accepted_tokens"] == 6 * (6 * 5 + 5)
