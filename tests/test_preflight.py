"""Pre-flight acceptance: the greedy step replay, and its estimate against a real run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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


def test_a_last_step_that_runs_out_of_output_is_censored():
    assert preflight.censored([True, True], 5)  # accepted both tokens left, 2 < 5
    assert not preflight.censored([True, False], 5)  # ended at a disagreement
    assert not preflight.censored([True, True, True], 3)  # all K drafts inside the output
    assert not preflight.censored([True, True, True, True], 3)  # last step: bonus token only


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


@pytest.mark.slow
def test_estimate_equals_the_measured_greedy_acceptance(tiny_pair, tmp_path):
    """Per request, every verify step vLLM records equals the replay's, except a censored
    last step (the replay accepted every token left, fewer than K): vLLM verifies its
    drafts past the output's end too and counts those accepted, so there it may count
    more; its step count and drafted tokens are still equal."""
    # The random pair is degenerate (both repeat one token: every draft accepted); a noisy
    # target writes varied tokens and a lightly noisier copy of it agrees about half the time.
    target = _noisy_copy(tiny_pair[0], tmp_path / "target", 1.0, 0)
    draft = _noisy_copy(target, tmp_path / "draft", 0.05, 1)
    common = [f"models.targets.cot={target}", f"models.drafts.cot={draft}",
              f"results_dir={tmp_path / 'results'}", "limit=6", "max_tokens=40"]  # fmt: skip
    from harness.job import run_job

    engines.clear()
    try:
        base_cfg = compose_config([*common, "variant=cot", "spec.k=0"])
        run_job(base_cfg, progress=False)
        measured = {}
        for k in (1, 3):
            cfg = compose_config([*common, "variant=cot_sd", f"spec.k={k}"])
            run_job(cfg, progress=False)
            cols = ["problem_id", "acceptance_histogram", "num_draft_tokens"]
            path = results.sweep_dir(cfg) / results.job_name(cfg) / results.REQUESTS
            measured[k] = {
                r["problem_id"]: r for r in pq.read_table(path, columns=cols).to_pylist()
            }
    finally:
        engines.clear()
    base_dir = results.sweep_dir(base_cfg) / results.job_name(base_cfg)
    estimate = preflight.estimate(base_dir, str(draft), [1, 3])
    assert json.loads(json.dumps(estimate)) == estimate  # what preflight.json holds
    assert len(estimate["agree"]) == 6
    for k in (1, 3):
        accepted = drafted = 0
        for pid, bits in estimate["agree"].items():
            agree = [b == "1" for b in bits]
            steps, got = greedy_steps(agree, k), measured[k][pid]
            assert got["num_draft_tokens"] == k * len(steps), (k, pid)
            replayed = _histogram(steps, k)
            diff = [m - r for m, r in zip(got["acceptance_histogram"], replayed, strict=True)]
            if preflight.censored(agree, k) and any(diff):
                last = steps[-1]  # moved up by the drafts accepted past the output's end
                assert diff[last] == -1 and sum(diff) == 0, (k, pid, diff)
                assert next(j for j, d in enumerate(diff) if d == 1) > last, (k, pid, diff)
            else:
                assert not any(diff), (k, pid, diff)
            accepted += sum(steps)
            drafted += k * len(steps)
        assert 0 < accepted < drafted
        assert estimate["ks"][str(k)]["num_accepted_tokens"] == accepted
