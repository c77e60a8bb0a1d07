"""EAGLE-3 heads: trained here (:mod:`train.eagle3`) on the tiny random target's own greedy
answers, checked against their target before any engine, then run by ``python -m harness``
on a real vLLM CPU engine (``method: eagle3``) beside the plain target and calibrated."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_preflight import assert_replay_equals_vllm, estimate_and_measure

from harness import speculators
from harness.config import ConfigError, compose_config
from harness.data import synth
from train.eagle3 import Settings, accuracy, new_head, target_features, train_head

pytestmark = pytest.mark.slow

SETTINGS = Settings(max_steps=40, batch_size=4, learning_rate=3e-3, logging_steps=20)
KS = (1, 2, 3)


@pytest.fixture(scope="module")
def target(tiny_pair, tmp_path_factory) -> Path:
    """The random target with seeded noise on its weights: answers that change token now
    and then (the bare random model repeats one token, which any head predicts)."""
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("eagle3_target") / "target"
    shutil.copytree(tiny_pair[0], out)
    model = AutoModelForCausalLM.from_pretrained(tiny_pair[0], dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def answers(target) -> list[dict]:
    """The target's own greedy answers (transformers) to 40 synthetic questions, asked as
    the harness asks its cot variant."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.data.prompts import build_messages, prompt_token_ids

    prompts = compose_config(["variant=cot"]).prompts
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    rows = []
    for problem in synth.generate("easy", "train", 40, seed=1):
        prompt = build_messages(problem, "cot", prompts)
        ids = torch.tensor([prompt_token_ids(tokenizer, prompt)])
        out = model.generate(ids, max_new_tokens=24, do_sample=False, min_new_tokens=24)
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        rows.append({"id": problem.id, "prompt": prompt,
                     "completion": [{"role": "assistant", "content": text}]})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def head(target, answers, tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle3") / "head"
    return out, train_head(str(target), answers, SETTINGS, out)


def test_training_teaches_the_head_the_targets_next_tokens(target, answers, head):
    target = str(target)
    _, result = head
    held = target_features(target, answers[:4], [0, 1, 2], SETTINGS.max_length)
    untrained = accuracy(new_head(target, [0, 1, 2], SETTINGS, None), held, SETTINGS.ttt_steps)
    # the first draft step of the trained head predicts the target's greedy token far
    # more often than the untrained one (held-back answers, conditional accuracy)
    assert result.accuracy[0] > untrained[0] + 0.3
    assert result.steps == SETTINGS.max_steps and result.final_loss == result.final_loss


def test_the_saved_head_is_what_vllm_loads_as_eagle3(target, head):
    out, _ = head
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]  # all of a 2-layer target
    assert (
        speculators.get("eagle3")
        .plan_check(str(target), str(out))
        .startswith("eagle3 head matches")
    )


def test_a_head_of_another_width_or_vocabulary_fails_before_any_engine(target, head, tmp_path):
    out, _ = head
    for field, value, said in (
        ("hidden_size", 64, "reads hidden states of size 64"),
        ("vocab_size", 7, "vocabulary has 7 tokens"),
    ):
        bad = tmp_path / field
        shutil.copytree(out, bad)
        config = json.loads((bad / "config.json").read_text())
        config["transformer_layer_config"][field] = value
        (bad / "config.json").write_text(json.dumps(config))
        with pytest.raises(ConfigError, match=said):
            speculators.get("eagle3").plan_check(str(target), str(bad))
    host = tmp_path / "gpt2"
    host.mkdir()
    config = json.loads((target / "config.json").read_text())
    (host / "config.json").write_text(json.dumps(config | {"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConfigError, match="cannot host eagle3 heads"):
        speculators.get("eagle3").plan_check(str(host), str(out))


def test_a_head_runs_lossless_through_the_harness_with_acceptance_and_calibration(
    target, head, tmp_path
):
    out, _ = head
    results_dir = tmp_path / "results"
    cmd = [
        sys.executable, "-m", "harness", "variant=cot_eagle3", "spec.k=2",
        f"models.targets.cot={target}", f"models.drafts.eagle3_cot={out}",
        f"results_dir={results_dir}", "limit=3", "max_tokens=24", "sweep=eagle3",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = (results_dir / "eagle3").glob("cot_eagle3-*")
    rows = pq.read_table(job / "requests.parquet").to_pylist()
    summary = json.loads((job / "summary.json").read_text())
    assert len(rows) == 3 and summary["method"] == "eagle3" and summary["pairing"] == "interleaved"
    # greedy EAGLE-3 decoding equals the plain target's, problem by problem, in one window
    assert [r["output_hash"] for r in rows] == [r["pair_output_hash"] for r in rows]
    steps = sum(r["num_draft_tokens"] for r in rows) // 2
    assert steps > 0 and all(0 <= r["acceptance_rate"] <= 1 for r in rows)
    assert summary["spec"]["num_accepted_tokens"] == sum(r["num_accepted_tokens"] for r in rows)
    # a head drafts at every step, so each step's place in its answer is known
    assert all(sum(r["accepted_thirds"]) == r["num_accepted_tokens"] for r in rows)
    assert all(sum(r["drafted_thirds"]) == r["num_draft_tokens"] for r in rows)
    calibrations = [
        json.loads(p.read_text()) for p in (results_dir / "eagle3" / ".calibration").glob("*.json")
    ]
    (calibrated,) = [c for c in calibrations if c["k"] == 2 and c["draft"] == str(out)]
    # the verify step is priced on the head's own engine, the plain target in the same window
    measured = calibrated["measurements"]["1"]
    assert measured["per_unit_s"] > 0 and measured["baseline_per_unit_s"] > 0


def test_preflight_replays_the_heads_chains_exactly_as_vllm_runs_them(target, head, tmp_path):
    out, _ = head
    estimate, measured = estimate_and_measure(target, out, tmp_path, KS, "cot_eagle3")
    assert_replay_equals_vllm(estimate, measured)  # per request: steps, drafts, histogram
    # the chains accepted something: the replay was put to the test
    assert sum(estimate["ks"][str(k)]["num_accepted_tokens"] for k in KS) > 0
