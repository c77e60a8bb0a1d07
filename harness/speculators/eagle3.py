"""EAGLE-3: a head over three of the target's layers, trained here (``train.eagle3``) in the
speculators format vLLM loads; its pre-flight replays the chains vLLM runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.speculators.base import Teacher, bits
from harness.speculators.heads import Head


def hidden_states(model: Any, tokens: Sequence[int], layer_ids: Sequence[int]) -> tuple[Any, Any]:
    """A causal LM's fused hidden states at ``layer_ids`` (id ``i``: the input of layer
    ``i`` as vLLM counts, the number of layers: the last layer's output before the final
    norm) and that last output, over ``tokens``: ``([L, len(ids) * hidden], [L, hidden])``."""
    import torch

    captured: dict[str, Any] = {}
    hook = model.model.norm.register_forward_hook(
        lambda _m, args, _o: captured.update(last=args[0])
    )
    try:
        with torch.no_grad():
            hidden = model(torch.tensor([list(tokens)]), output_hidden_states=True).hidden_states
    finally:
        hook.remove()
    # transformers' last entry is after the final norm; vLLM's id n is before it
    hidden = (*hidden[:-1], captured["last"])
    return torch.cat([hidden[i][0] for i in layer_ids], dim=-1), captured["last"][0]


def head_agreement(
    head: Any, target: Any, prompt: Sequence[int], tokens: Sequence[int], depth: int
) -> list[list[bool]]:
    """``agree[p][d]``: whether the head's chain starting after token ``p`` of ``tokens``
    (an output and any continuation) drafts token ``p + 1 + d``, for every ``p`` with a
    next token; its unroll fed the target's hidden states of prompt + tokens."""
    import torch

    seq = [*prompt, *tokens]
    aux, _ = hidden_states(target, seq, head.config.eagle_aux_hidden_state_layer_ids)
    ids = torch.tensor(seq)
    with torch.no_grad():  # speculators' shift: position i holds token i + 1, hidden i
        drafts = head(
            hidden_states=aux[:-1][None],
            input_ids=ids[1:][None],
            document_ids=torch.zeros(1, len(seq) - 1, dtype=torch.long),
            position_ids=torch.arange(1, len(seq))[None],
            ttt_steps=depth,
        )
    # a chain after output token p reads packed index P + p - 1 (P prompt tokens); depth d
    # drafts output token p + 1 + d
    start = len(prompt) - 1
    return [
        [
            int(drafts[d][0, start + p]) == tokens[p + 1 + d]
            for d in range(depth)
            if p + 1 + d < len(tokens)
        ]
        for p in range(len(tokens) - 1)
    ]


def load_head(head: str) -> Any:
    """An EAGLE-3 head for its unroll on CPU (SDPA attention: flex attention needs CUDA),
    from its own files alone (speculators' loader also reads the target it was trained on)."""
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    config = Eagle3SpeculatorConfig.from_pretrained(head)
    config.transformer_layer_config._attn_implementation = "sdpa"
    model = Eagle3DraftModel(config)
    weights = {}
    for path in sorted(Path(head).glob("*.safetensors")):
        weights |= load_file(path)
    model.load_state_dict(weights, strict=False)  # the verifier's norm and LM head: unused
    return model.eval()


class Eagle3(Head):
    method = "eagle3"
    what = "an EAGLE-3 head over the target's hidden states"
    host_interface = "supports_eagle3"
    trained_by = "train.eagle3"

    def fused_layers(self, layers: list[int], head: dict[str, Any], name: str) -> None:
        fused = head.get("num_aux_hidden_states") or len(
            (head.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [None] * 3
        )  # what vLLM sizes the head's input for
        if layers and len(layers) != fused:
            raise ConfigError(
                f"draft={name}: the eagle3 head fuses {len(layers)} layers {layers}; vLLM "
                f"builds its input for {fused} (set eagle_config.eagle_aux_hidden_state_layer_ids)"
            )

    def recognises(self, config: dict[str, Any]) -> bool:
        return config.get("speculators_model_type") == "eagle3"

    def describe(self, config: dict[str, Any]) -> str:
        layers = (config.get("transformer_layer_config") or {}).get("num_hidden_layers", "?")
        return f"eagle3 head, {layers} layer(s), vocab {config.get('draft_vocab_size')}"

    def replay_model(self, draft: str) -> Any:
        return load_head(draft)

    def replay(
        self, model: Any, target: Teacher, prompt: Sequence[int], output: Sequence[int], depth: int
    ) -> tuple[list[Any], list[bool]]:
        """Every chain start reads the target's hidden states, past the end included."""
        tokens = [*output, *target.more()]
        chains = head_agreement(model, target.model(), prompt, tokens, depth)
        return chains[: max(len(output) - 1, 0)], []

    def firsts(self, agree: list[Any]) -> list[bool]:
        return [chain[0] for chain in agree if chain]

    def encode(self, agree: list[Any], depth: int) -> str | list[str]:
        """Depth-major: one string per depth, over the chain starts (unknown = 0)."""
        return [bits([d < len(chain) and chain[d] for chain in agree]) for d in range(depth)]


FAMILY = Eagle3()
