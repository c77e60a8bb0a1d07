"""Distillation data: a trained target answers training prompts greedily through vLLM.

The draft is then fine-tuned on these answers, so it learns the target's own output
distribution (what speculative decoding needs it to predict), errors included. The
prompts go through the benchmark's own code: :func:`harness.data.prompts.prompt_token_ids`
and the harness engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def distil_rows(
    model_dir: str | Path, rows: list[dict], engine_settings: Mapping[str, Any], max_tokens: int
) -> tuple[list[dict], float]:
    """``rows`` with each completion replaced by the model's greedy answer to its prompt, and
    the engine's start-up seconds.

    Starts an engine for ``model_dir`` with ``engine_settings`` (the ``engine`` config
    group) and shuts it down afterwards; call under ``if __name__ == "__main__"``.
    """
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from harness.backends import engine
    from harness.data.prompts import prompt_token_ids

    spec = engine.EngineSpec.plain(str(Path(model_dir).resolve()), engine_settings)
    tokenizer = AutoTokenizer.from_pretrained(spec.target)
    prompts = [{"prompt_token_ids": prompt_token_ids(tokenizer, r["prompt"])} for r in rows]
    live, _ = engine.get(spec)
    try:
        outputs = live.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    finally:
        engine.clear()
    answers = [
        {**r, "completion": [{"role": "assistant", "content": out.outputs[0].text}]}
        for r, out in zip(rows, outputs, strict=True)
    ]
    return answers, live.start_s
