"""Fold a LoRA adapter into its base weights: a standalone model directory vLLM loads."""

from __future__ import annotations

from pathlib import Path

from train.config import TrainConfig
from train.loading import load_model


def merge_lora(
    base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path, cfg: TrainConfig
) -> Path:
    """Load ``base_dir``, apply the adapter, ``merge_and_unload`` and save model + tokenizer."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    merged = PeftModel.from_pretrained(
        load_model(base_dir, cfg), str(adapter_dir)
    ).merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(out)
    return out
