"""Draft models (vLLM's ``draft_model``), the trainer of :mod:`harness.speculators.draft_model`.

Each trained target's draft is fully fine-tuned on the target's own greedy answers
(:func:`train.distil.distilled`), from the experiment's base draft or from layers cut from
the target (``draft_layers``, :func:`train.derive.derived_draft`), its embeddings padded to
the target's size.
"""

from __future__ import annotations

from harness.checks import config_vocab_size
from train.derive import derived_draft
from train.distil import distilled
from train.steps import TrainedTarget, flat, train_model


def build(target: TrainedTarget) -> dict[str, str]:
    """The draft of ``target``'s style, ``draft_<style>``, distilled from it."""
    cfg, style = target.cfg, target.style
    answers = distilled(cfg, target.model, style, flat(target.rows, cfg.distil.max_problems))
    draft = train_model(
        f"draft_{style}",
        derived_draft(cfg, target.model) if cfg.draft_layers else target.base_draft,
        answers,
        None,
        cfg.draft,
        target.drafts[style],
        cfg,
        vocab_size=config_vocab_size(target.model.path),
        teacher=target.model,
    )
    return {f"draft_{style}": draft.path}
