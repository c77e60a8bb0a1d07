"""The local tokenizer and tiny random Qwen2 models; SFT and merge of them (slow: training)."""

from __future__ import annotations

import pytest

from harness.data import synth
from train.teachers.synthetic import solutions
from train.tiny import TinyModelConfig, build_random_pair, qwen2_config
from train.tokenizer import IM_END, PAD, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    problems = synth.generate("medium", "train", 50, 0)
    return train_tokenizer([t for p in problems for t in (p.question, *solutions(p))], 400)


def test_digits_are_split_one_by_one_keeping_a_leading_space(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("She has 1234 coins, 56+7=63")["input_ids"])
    digits = [t for t in tokens if any(c.isdigit() for c in t)]
    space = "\u0120"  # byte-level space
    assert digits == [f"{space}1", *"234", f"{space}5", *"67", *"63"]


def test_text_round_trips(tokenizer):
    text = "1. Mia has 12 stickers.\n2. She buys 5 more. 12 + 5 = 17.\n#### 17"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_chat_prompt_is_a_prefix_of_the_full_chat_and_ends_with_eos(tokenizer):
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    full = [*prompt, {"role": "assistant", "content": "#### 4"}]
    p = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    f = tokenizer.apply_chat_template(full, tokenize=False)
    assert f.startswith(p) and p.endswith("<|im_start|>assistant\n")
    assert f.endswith(f"#### 4{IM_END}\n")
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == PAD
    assert tokenizer.eos_token_id != tokenizer.pad_token_id


def test_model_config_uses_64_wide_heads_and_the_tokenizer_ids(tokenizer):
    cfg = qwen2_config(
        TinyModelConfig(hidden_size=256, num_layers=3, intermediate_size=512), tokenizer
    )
    assert (cfg.num_attention_heads, cfg.head_dim, cfg.vocab_size) == (4, 64, len(tokenizer))
    assert cfg.eos_token_id == tokenizer.eos_token_id


def test_hidden_size_not_a_multiple_of_64_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="hidden_size=96"):
        qwen2_config(TinyModelConfig(hidden_size=96), tokenizer)


def test_random_pair_loads_and_shares_the_tokenizer(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target, draft = build_random_pair(tmp_path)
    t_model = AutoModelForCausalLM.from_pretrained(target)
    d_model = AutoModelForCausalLM.from_pretrained(draft)
    assert t_model.num_parameters() > d_model.num_parameters()
    assert (
        AutoTokenizer.from_pretrained(target).get_vocab()
        == AutoTokenizer.from_pretrained(draft).get_vocab()
    )
    assert t_model.config.vocab_size == d_model.config.vocab_size


def _chat_rows() -> list[dict]:
    """Two copies of one easy problem's CoD chat."""
    problem = synth.generate("easy", "train", 1, 0)[0]
    return [
        {
            "prompt": [{"role": "user", "content": problem.question}],
            "completion": [{"role": "assistant", "content": solutions(problem)[1]}],
        }
    ] * 2


@pytest.mark.slow
def test_sft_pads_a_draft_to_its_targets_vocab_size(tmp_path):
    """Qwen2.5-0.5B has fewer embedding rows than Qwen2.5-14B: the draft is padded."""
    import json

    from harness.speculators.draft_model import check_same_vocab
    from train.config import SFTSettings, compose_train_config
    from train.sft import sft

    target, draft = build_random_pair(tmp_path)
    size = json.loads((target / "config.json").read_text())["vocab_size"]
    cfg = compose_train_config(["experiment=tiny", "threads=1"])
    settings = SFTSettings(max_steps=1, batch_size=2, save_steps=10)
    out = tmp_path / "draft_padded"
    sft(draft, _chat_rows(), out, settings, cfg, tmp_path / "work", vocab_size=size + 64)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == size + 64
    with pytest.raises(Exception, match="vocab_size"):
        check_same_vocab(str(target), str(out))


@pytest.mark.slow
def test_lora_sft_saves_the_adapter_and_merge_folds_it_into_the_base(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from train.config import LoraSettings, SFTSettings, compose_train_config
    from train.merge import merge_lora
    from train.sft import sft

    target, _ = build_random_pair(tmp_path)
    cfg = compose_train_config(["experiment=tiny", "threads=1"])
    lora = LoraSettings(r=4, alpha=8)
    settings = SFTSettings(
        max_steps=1, batch_size=2, save_steps=10, learning_rate=0.05, warmup_ratio=0.0, lora=lora
    )
    adapter = tmp_path / "adapter"
    sft(target, _chat_rows(), adapter, settings, cfg, tmp_path / "work")
    assert (adapter / "adapter_config.json").is_file()
    assert not (adapter / "config.json").exists()  # an adapter, not a merged model
    merged = merge_lora(target, adapter, tmp_path / "merged", cfg)
    base = AutoModelForCausalLM.from_pretrained(target).state_dict()
    folded = AutoModelForCausalLM.from_pretrained(merged).state_dict()
    assert base.keys() == folded.keys()  # plain Qwen2 weights, no adapter left
    assert any(not torch.equal(base[k], folded[k]) for k in base)


def test_pretraining_pages_hold_the_full_or_the_terse_solution_after_the_question():
    from train.pretrain import pretrain_rows

    problem = synth.generate("medium", "train", 1, 0)[0]
    rows = pretrain_rows([], {"cot": [problem], "cod": [problem]}, {}, None, seed=0)
    assert sorted(r["completion"] for r in rows) == sorted(solutions(problem))
    assert {r["prompt"] for r in rows} == {f"{problem.question}\n\n"}
