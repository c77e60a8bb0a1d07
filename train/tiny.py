"""Tiny random-init Qwen2 models that vLLM loads, for the offline world and for tests.

Heads are 64 wide because vLLM's CPU attention supports only some head sizes (32, 64,
80, 96, 112, 128, ...; 16 is rejected), so ``hidden_size`` must be a multiple of 64.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.data import synth
from train.teachers.synthetic import solutions

HEAD_DIM = 64


@dataclass
class TinyModelConfig:
    """Shape of a tiny Qwen2 model (heads = hidden_size / 64)."""

    hidden_size: int = 128
    num_layers: int = 2
    intermediate_size: int = 256
    num_kv_heads: int | None = None  # None = as many as query heads
    max_position_embeddings: int = 1024


def qwen2_config(shape: TinyModelConfig, tokenizer):
    """A ``Qwen2Config`` of ``shape`` whose vocabulary and special ids match ``tokenizer``."""
    from transformers import Qwen2Config

    if shape.hidden_size % HEAD_DIM:
        raise ValueError(f"hidden_size={shape.hidden_size}: must be a multiple of {HEAD_DIM}")
    heads = shape.hidden_size // HEAD_DIM
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=shape.num_kv_heads or heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        dtype="float32",
    )


def build_random_model(
    shape: TinyModelConfig, tokenizer, out_dir: str | Path, seed: int = 0
) -> Path:
    """Save a random-init Qwen2ForCausalLM of ``shape`` plus ``tokenizer`` to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen2_config(shape, tokenizer))
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_random_pair(out_dir: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """A random target (2 x 128) and draft (1 x 64) sharing one tokenizer; for tests.

    Takes a few seconds; returns ``(target_dir, draft_dir)`` under ``out_dir``.
    """
    from train.tokenizer import train_tokenizer

    problems = [p for d in synth.LEVELS for p in synth.generate(d, "train", 100, seed)]
    texts = [t for p in problems for t in (p.question, *solutions(p))]
    tokenizer = train_tokenizer(texts, vocab_size=512)
    out = Path(out_dir)
    target = build_random_model(TinyModelConfig(128, 2, 256), tokenizer, out / "target", seed)
    draft = build_random_model(TinyModelConfig(64, 1, 128), tokenizer, out / "draft", seed + 1)
    return target, draft
