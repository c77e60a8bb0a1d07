"""A draft derived from its target: the target's first layers, final norm and embeddings.

vLLM's draft-model mode needs the target's tokenizer; when no smaller model of the same
family ships (SmolLM2-135M offline), a cut of the target is the draft to train. The cut
keeps the embeddings, some decoder layers (the first ones, or the first and the last ones
with the middle skipped), the final norm and the LM head (tied or not) with their
weights; it is untrained as a whole, so it must then be distilled (``train.sft``,
objective ``sft`` or ``kl``).
"""

from __future__ import annotations

from pathlib import Path

from harness.files import atomic_dir
from harness.manifest import digest
from train.config import TrainConfig
from train.steps import Built


def truncated(model_dir: str | Path, out_dir: str | Path, num_layers: int, last: int = 0) -> Path:
    """Save ``num_layers`` decoder layers of ``model_dir`` (with its embeddings, final norm,
    LM head and tokenizer) to ``out_dir``: its first ``num_layers - last`` layers, then its
    last ``last`` ones (skipping the middle, as self-speculative drafts do).

    Raises:
        ValueError: ``num_layers`` not in 1 .. the model's layer count, or ``last`` not in
            0 .. ``num_layers``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    layers = model.config.num_hidden_layers
    if not 1 <= num_layers <= layers:
        raise ValueError(f"num_layers={num_layers}: {model_dir} has {layers} layers")
    if not 0 <= last <= num_layers:
        raise ValueError(f"last={last}: must be between 0 and num_layers={num_layers}")
    keep = [*range(num_layers - last), *range(layers - last, layers)]
    model.model.layers = torch.nn.ModuleList(model.model.layers[i] for i in keep)
    for i, layer in enumerate(model.model.layers):  # the KV cache slot of each kept layer
        layer.self_attn.layer_idx = i
    model.config.num_hidden_layers = num_layers
    if getattr(model.config, "layer_types", None):  # per-layer attention kinds (transformers 5)
        model.config.layer_types = [model.config.layer_types[i] for i in keep]
    out = Path(out_dir)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(out)
    return out


def derived_draft(cfg: TrainConfig, target: Built) -> Built:
    """``cfg.draft_layers`` layers of ``target`` (its first ones, then its last
    ``cfg.draft_last_layers``), untrained as a draft (cached by key)."""
    last = cfg.draft_last_layers
    key = digest({"derived_from": target.key, "layers": cfg.draft_layers}
                 | ({"last_layers": last} if last else {}))  # fmt: skip
    out = Path(cfg.work_dir) / f"draft-init-{key}"
    if not out.is_dir():
        with atomic_dir(out) as tmp:
            truncated(target.path, tmp, cfg.draft_layers, last)
    return Built(str(out), key)
