"""A draft model: a small causal LM with the target's tokenizer drafts K tokens per step."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from harness.checks import config_vocab_size, load_causal_lm, load_tokenizer
from harness.errors import ConfigError
from harness.speculators.base import Speculator


def check_vocab_sizes(target: str, draft: str) -> str | None:
    """Equal embedding sizes (vLLM refuses a draft model whose vocab_size differs).

    Returns a note when a config.json is neither local nor cached (the check is skipped).
    """
    t_size, d_size = config_vocab_size(target), config_vocab_size(draft)
    if t_size is None or d_size is None:
        missing = target if t_size is None else draft
        return f"vocab check skipped: no local or cached config.json for {missing}"
    if t_size != d_size:
        raise ConfigError(
            f"draft={draft}: vocab_size {d_size} differs from target {target}'s {t_size}; "
            f"vLLM needs equal embedding sizes: pad the draft's embeddings to {t_size} rows "
            "(the training pipeline pads the drafts it trains)"
        )
    return None


def check_same_vocab(target: str, draft: str) -> None:
    """Draft and target must share the tokenizer and the embedding size (vLLM's rule)."""
    t_vocab, d_vocab = load_tokenizer(target).get_vocab(), load_tokenizer(draft).get_vocab()
    if t_vocab != d_vocab:
        differ = len(t_vocab.items() ^ d_vocab.items())
        raise ConfigError(
            f"draft={draft}: its tokenizer differs from target {target}'s "
            f"({len(d_vocab)} vs {len(t_vocab)} tokens, {differ} entries differ)"
        )
    note = check_vocab_sizes(target, draft)
    if note:
        print(note, file=sys.stderr)


def agreement(model: Any, prompt: Sequence[int], output: Sequence[int]) -> list[bool]:
    """Whether ``model``'s greedy token equals output token j + 1, for j = 0..len(output) - 2."""
    import torch

    if len(output) < 2:
        return []
    ids = torch.tensor([[*prompt, *output[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 :]
    predicted = logits[1:].argmax(-1).tolist()  # predictions of output tokens 1..n-1
    return [p == t for p, t in zip(predicted, output[1:], strict=True)]


class DraftModel(Speculator):
    method = "draft_model"
    what = "a draft model sharing the target's tokenizer"
    timed_as_target = True
    trained_by = "train.draft_model"

    def plan_check(
        self, target: str, draft: str | None, target_config: dict | None = None
    ) -> str | None:
        return (check_vocab_sizes(target, draft) or "vocab sizes match") if draft else None

    def check(self, target: str, draft: str | None) -> None:
        if draft is not None:
            check_same_vocab(target, draft)

    def unbuilt_base(self, cfg: Any) -> str | None:
        return cfg.models.drafts.get("base")

    def recognises(self, config: dict[str, Any]) -> bool:
        """A causal LM of transformers (``*ForCausalLM``), not a speculators checkpoint."""
        causal = any(a.endswith("ForCausalLM") for a in config.get("architectures") or ())
        return causal and "speculators_model_type" not in config

    def replay_model(self, draft: str) -> Any:
        return load_causal_lm(draft, "draft")

    def agreement(self, model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> list[bool]:
        return agreement(model, prompt, tokens)


FAMILY = DraftModel()
