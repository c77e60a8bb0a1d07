"""Distillation data: a trained target answers training prompts greedily through vLLM.

The draft is then fine-tuned on these answers, so it learns the target's own output
distribution (what speculative decoding needs it to predict), errors included. The
prompts are rendered and generated exactly as the benchmark does (harness engine,
tokenizer chat template, token ids in).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def distil_rows(
    model_dir: str | Path, rows: list[dict], engine_settings: Mapping[str, Any], max_tokens: int
) -> list[dict]:
    """``rows`` with each completion replaced by the model's greedy answer to its prompt.

    Starts an engine for ``model_dir`` with ``engine_settings`` (the ``engine`` config
    group) and shuts it down afterwards; call under ``if __name__ == "__main__"``.
    """
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from harness import engine

    target = str(Path(model_dir).resolve())
    tokenizer = AutoTokenizer.from_pretrained(target)
    prompts = [
        {
            "prompt_token_ids": tokenizer(
                tokenizer.apply_chat_template(
                    r["prompt"], tokenize=False, add_generation_prompt=True
                ),
                add_special_tokens=False,
            )["input_ids"]
        }
        for r in rows
    ]
    spec = engine.EngineSpec(
        target=target, draft=None, k=0, settings=tuple(sorted(engine_settings.items()))
    )
    live, _ = engine.get(spec)
    try:
        outputs = live.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    finally:
        engine.clear()
    return [
        {**r, "completion": [{"role": "assistant", "content": out.outputs[0].text}]}
        for r, out in zip(rows, outputs, strict=True)
    ]
