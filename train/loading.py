"""Loading a causal LM for training or merging, in the dtype the train config asks for."""

from __future__ import annotations

from pathlib import Path

from train.config import TrainConfig


def load_model(model_dir: str | Path, cfg: TrainConfig):
    """A causal LM in fp32 on CPU, or bf16 on CUDA when ``cfg.bf16``."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if cfg.device == "cuda" and cfg.bf16 else torch.float32
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
