"""Distillation data: a trained target answers training prompts greedily through vLLM.

The draft is then fine-tuned on these answers, so it learns the target's own output
distribution (what speculative decoding needs it to predict), errors included; an EAGLE-3
head trains on them too. The prompts go through the benchmark's own code:
:func:`harness.data.prompts.prompt_token_ids` and the harness engine. :func:`distilled`
caches the answers per problem.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.manifest import build_key, data_hash
from train.config import TrainConfig
from train.steps import Built, read_jsonl, write_jsonl


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

    # processes of its own: an engine in this process would rebind the torch threads that
    # train the next model (vLLM's CPU worker sets them to its bound cores)
    settings = {**engine_settings, "multiprocessing": True}
    spec = engine.EngineSpec.plain(str(Path(model_dir).resolve()), settings)
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


def distilled(cfg: TrainConfig, target: Built, style: str, rows: list[dict]) -> list[dict]:
    """The target's own greedy answers to ``rows``' prompts.

    Cached per problem (by target, max_tokens and the row itself): one file per target
    grows as larger sets are asked for, and only the rows it lacks are distilled.
    """
    key = build_key(target.key, "per-row", {"max_tokens": cfg.distil.max_tokens})
    path = Path(cfg.work_dir) / f"distil-{style}-{key}.jsonl"
    have = {row["row"]: row["answer"] for row in read_jsonl(path)} if path.is_file() else {}
    ids = [data_hash([r]) for r in rows]
    missing = list({i: r for i, r in zip(ids, rows, strict=True) if i not in have}.items())
    if missing:
        print(f"[build] distilling {len(missing)} answers of {target.path} "
              f"({len(rows) - len(missing)} cached)", flush=True)  # fmt: skip
        start = time.perf_counter()
        engine = asdict(cfg.engine)
        out, engine_start_s = distil_rows(
            target.path, [r for _, r in missing], engine, cfg.distil.max_tokens
        )
        seconds = time.perf_counter() - start
        print(f"[build] distilled in {seconds:.0f} s ({engine_start_s:.0f} s engine start)",
              flush=True)  # fmt: skip
        have |= {i: a for (i, _), a in zip(missing, out, strict=True)}
        write_jsonl(path, [{"row": i, "answer": a} for i, a in have.items()])
    return [have[i] for i in ids]
