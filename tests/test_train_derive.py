"""A draft cut from its target, and logit distillation (forward KL) into it (HF only, CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.data import synth
from train.config import SFTSettings, compose_train_config
from train.derive import truncated
from train.sft import forward_kl, sft
from train.teachers.synthetic import solutions


def test_forward_kl_is_the_mean_kl_over_the_masked_positions():
    p = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]]])  # teacher logits
    q = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])  # uniform student
    mask = torch.tensor([[True, True, False]])
    # position 0: p = q, KL 0; position 1: p = (3/4, 1/4) against (1/2, 1/2); position 2 masked
    kl1 = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert forward_kl(p, q, mask).item() == pytest.approx(kl1 / 2)
    # under gradient accumulation the trainer gives the token count of the whole batch
    assert forward_kl(p, q, mask, num_items=torch.tensor(8)).item() == pytest.approx(kl1 / 8)
    assert forward_kl(p, p, torch.ones(1, 3, dtype=torch.bool)).item() == pytest.approx(0.0)


def test_a_padded_student_vocabulary_is_cut_to_the_teachers():
    teacher = torch.tensor([[[1.0, 2.0]]])
    student = torch.tensor([[[1.0, 2.0, 50.0]]])  # a padding row the data never uses
    assert forward_kl(teacher, student, torch.ones(1, 1, dtype=torch.bool)).item() == 0.0


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_a_cut_keeps_the_first_layers_norm_and_head(tiny_pair, tmp_path):
    from transformers import AutoModelForCausalLM

    target_dir, _ = tiny_pair
    target = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    assert target.config.num_hidden_layers == 2
    cut = AutoModelForCausalLM.from_pretrained(truncated(target_dir, tmp_path / "cut", 1)).eval()
    assert cut.config.num_hidden_layers == 1 and len(cut.model.layers) == 1
    ids = list(range(5, 25))
    with torch.no_grad():  # the target's state after its first layer, through its norm and head
        after_one = target(torch.tensor([ids]), output_hidden_states=True).hidden_states[1]
        expected = target.lm_head(target.model.norm(after_one))[0]
    torch.testing.assert_close(_logits(cut, ids), expected)
    assert not torch.allclose(_logits(target, ids), expected)  # the second layer mattered
    with pytest.raises(ValueError, match="num_layers=3"):
        truncated(target_dir, tmp_path / "bad", 3)


def test_a_cut_may_skip_the_middle_keeping_the_last_layers(tiny_pair, tmp_path):
    from transformers import AutoModelForCausalLM

    target_dir, _ = tiny_pair
    cut_dir = truncated(target_dir, tmp_path / "cut", 1, last=1)
    cut = AutoModelForCausalLM.from_pretrained(cut_dir).eval()
    assert cut.config.num_hidden_layers == 1
    # the target with its first layer dropped: its second layer straight on the embeddings
    skipped = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    skipped.model.layers = torch.nn.ModuleList(skipped.model.layers[1:])
    skipped.model.layers[0].self_attn.layer_idx = 0
    ids = list(range(5, 25))
    torch.testing.assert_close(_logits(cut, ids), _logits(skipped, ids))
    first = AutoModelForCausalLM.from_pretrained(truncated(target_dir, tmp_path / "first", 1))
    assert not torch.allclose(_logits(cut, ids), _logits(first.eval(), ids))
    with pytest.raises(ValueError, match="last=2"):
        truncated(target_dir, tmp_path / "bad", 1, last=2)


@pytest.mark.slow
def test_kl_training_brings_the_draft_closer_to_its_teacher(tiny_pair, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, draft_dir = tiny_pair
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    problems = synth.generate("easy", "train", 24, seed=3)
    rows = [{"prompt": p.question + "\n", "completion": solutions(p)[0]} for p in problems]
    cfg = compose_train_config(["experiment=tiny", "threads=1"])
    settings = SFTSettings(max_steps=30, batch_size=8, learning_rate=3e-3, objective="kl")

    def kl_to_target(model_dir) -> float:
        teacher = AutoModelForCausalLM.from_pretrained(target_dir).eval()
        student = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        total = 0.0
        for row in rows:
            prompt = tokenizer(row["prompt"])["input_ids"]
            ids = prompt + tokenizer(row["completion"])["input_ids"]
            mask = torch.tensor([[i >= len(prompt) - 1 for i in range(len(ids) - 1)]])
            t, s = _logits(teacher, ids)[None, :-1], _logits(student, ids)[None, :-1]
            total += forward_kl(t, s, mask).item()
        return total / len(rows)

    before = kl_to_target(draft_dir)
    with pytest.raises(ValueError, match="teacher"):
        sft(draft_dir, rows, tmp_path / "x", settings, cfg, tmp_path / "wx")
    result = sft(
        draft_dir, rows, tmp_path / "kl", settings, cfg, tmp_path / "w", teacher_dir=target_dir
    )
    assert result.steps == 30 and math.isfinite(result.final_loss)
    assert kl_to_target(tmp_path / "kl") < 0.5 * before


def test_only_drafts_take_the_kl_objective():
    from harness.config import ConfigError

    assert compose_train_config(["draft.objective=kl"]).draft.objective == "kl"
    with pytest.raises(ConfigError, match=r"target\.objective=kl"):
        compose_train_config(["target.objective=kl"])
    with pytest.raises(ConfigError, match=r"draft\.objective=jsd"):
        compose_train_config(["draft.objective=jsd"])


def test_the_last_layers_of_a_derived_draft_are_among_its_layers():
    from harness.config import ConfigError

    cfg = compose_train_config(["draft_layers=4", "draft_last_layers=2"])
    assert (cfg.draft_layers, cfg.draft_last_layers) == (4, 2)
    with pytest.raises(ConfigError, match=r"draft_last_layers=5"):
        compose_train_config(["draft_layers=4", "draft_last_layers=5"])
