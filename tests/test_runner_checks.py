"""Bad input fails with one line naming the value, before any engine starts."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harness.checks import check_model_dir, looks_local
from harness.config import ConfigError, compose_config
from harness.sweep.runner import prepare
from tests import cli


def _prepare(overrides: list[str]):
    return prepare(compose_config(overrides))


def test_prepared_job_renders_chat_prompts_with_the_target_tokenizer(tiny_overrides, tiny_pair):
    from transformers import AutoTokenizer

    job = _prepare([*tiny_overrides, "variant=cot_sd", "spec.k=2"])
    assert len(job.requests) == 3 and job.spec.k == 2 and job.spec.draft is not None
    text = AutoTokenizer.from_pretrained(tiny_pair[0]).decode(job.requests[0].prompt_token_ids)
    assert text.startswith("<|im_start|>system\nThink step by step")
    assert job.requests[0].problem.question in text
    assert text.endswith("<|im_start|>assistant\n")


def test_k0_job_of_an_sd_variant_loads_no_draft(tiny_overrides):
    job = _prepare([*tiny_overrides, "variant=cot_sd", "spec.k=0"])
    assert job.spec.draft is None and job.info.draft is None


def test_hub_ids_are_not_local_paths():
    assert not looks_local("Qwen/Qwen2.5-0.5B-Instruct")
    assert looks_local("models/tiny/target_cot") and looks_local("./target")
    check_model_dir("models.targets.base", "Qwen/Qwen2.5-0.5B-Instruct")


@pytest.mark.parametrize("role", ["targets", "drafts"])
def test_missing_model_directory_is_named(tiny_overrides, tmp_path, role):
    missing = tmp_path / "no_such_model"
    with pytest.raises(
        ConfigError, match=f"models.{role}.cot={missing}: model directory not found"
    ):
        _prepare([*tiny_overrides, "variant=cot_sd", "spec.k=2", f"models.{role}.cot={missing}"])


def test_draft_with_another_tokenizer_is_refused(tiny_overrides, tmp_path):
    from harness.data import synth
    from train.tiny import TinyModelConfig, build_random_model
    from train.tokenizer import train_tokenizer

    texts = [p.question for p in synth.generate("easy", "train", 50, 0)]
    other = build_random_model(
        TinyModelConfig(64, 1, 128), train_tokenizer(texts, 300), tmp_path / "d"
    )
    with pytest.raises(ConfigError, match=f"draft={other}: its tokenizer differs"):
        _prepare([*tiny_overrides, "variant=cot_sd", "spec.k=2", f"models.drafts.cot={other}"])


def test_draft_with_another_embedding_size_is_refused(tiny_overrides, tiny_pair, tmp_path):
    draft = shutil.copytree(tiny_pair[1], tmp_path / "padded_draft")
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(
        json.dumps({**config, "vocab_size": config["vocab_size"] + 64})
    )
    with pytest.raises(
        ConfigError, match=r"vocab_size .* differs .* vLLM needs equal embedding sizes"
    ):
        _prepare([*tiny_overrides, "variant=cot_sd", "spec.k=1", f"models.drafts.cot={draft}"])


def test_prompt_plus_max_tokens_over_max_model_len_is_refused(tiny_overrides):
    with pytest.raises(
        ConfigError, match=r"engine.max_model_len=128: problem \S+ needs \d+ prompt \+ 64"
    ):
        _prepare([*tiny_overrides, "variant=cot", "engine.max_model_len=128", "max_tokens=64"])


def test_concurrency_above_the_engines_batch_is_refused(tiny_overrides):
    with pytest.raises(ConfigError, match=r"concurrency=64: must be <= engine\.max_num_seqs=32"):
        _prepare([*tiny_overrides, "variant=cot", "concurrency=64"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return cli.run("harness", *args)


def test_cli_prints_one_error_line_and_exits_2(tiny_overrides, tmp_path):
    missing = tmp_path / "gone"
    single = _cli(*tiny_overrides, "variant=cot_sd", "spec.k=2", f"models.drafts.cot={missing}")
    assert single.returncode == 2
    assert single.stderr.strip().splitlines() == [
        f"error: models.drafts.cot={missing}: model directory not found"
    ]
    sweep = _cli("-m", *tiny_overrides, "variant=cot", "spec.k=0", "limit=2,-1")
    assert sweep.returncode == 2
    assert sweep.stderr.strip().splitlines()[-1] == "error: limit=-1: must be > 0 or null"
    assert "Launching" not in sweep.stdout + sweep.stderr
