"""Heads over the target's hidden states (EAGLE, Medusa, DFlash): checkpoints vLLM loads
for your own targets; the checks every head family shares (:class:`Head`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar

from harness.checks import looks_local, model_config
from harness.errors import ConfigError
from harness.speculators.base import Speculator


@lru_cache(maxsize=8)
def target_hosts(architectures: tuple[str, ...], interface: str) -> bool | None:
    """Whether vLLM's class for ``architectures`` passes ``interface`` (a predicate of
    ``vllm.model_executor.models.interfaces``); None when not known here."""
    if not architectures:
        return None
    from vllm.model_executor.models import ModelRegistry, interfaces

    cls = ModelRegistry._try_load_model_cls(architectures[0])  # no public twin in vLLM 0.32
    return None if cls is None else getattr(interfaces, interface)(cls)


class Head(Speculator):
    """A head reads hidden states of the target's width, predicts into its vocabulary,
    fuses layers the target has, and needs a target vLLM lets host it."""

    unbuilt_layers = 1  # sized as one decoder layer of its target
    host_interface: ClassVar[str | None] = None  # vLLM's predicate for a hosting target

    def fused_layers(self, layers: list[int], head: dict[str, Any], name: str) -> None:
        """Family rules on the layer ids the head fuses (raises :class:`ConfigError`)."""

    def plan_check(
        self, target: str, draft: str | None, target_config: dict | None = None
    ) -> str | None:
        if draft is None:
            return None
        t, h = target_config or model_config(target), model_config(draft)
        if t is None or h is None:
            missing = target if t is None else draft
            fetch = (
                "" if looks_local(missing) else f" (fetch it: hf download {missing} config.json)"
            )
            return f"head check skipped: no local or cached config.json for {missing}{fetch}"
        layer = h.get("transformer_layer_config") or h  # speculators' format nests the layer's
        width = h.get("target_hidden_size") or layer.get("hidden_size")
        if width is not None and width != t.get("hidden_size"):
            raise ConfigError(
                f"draft={draft}: the {self.method} head reads hidden states of size {width}, "
                f"target {target} has hidden_size {t.get('hidden_size')}"
            )
        vocab = layer.get("vocab_size")
        if vocab is not None and vocab != t.get("vocab_size"):
            raise ConfigError(
                f"draft={draft}: the {self.method} head's vocabulary has {vocab} tokens, "
                f"target {target}'s {t.get('vocab_size')}"
            )
        layers = h.get("eagle_aux_hidden_state_layer_ids") or []
        self.fused_layers(layers, h, draft)
        if layers and not all(0 <= i <= t.get("num_hidden_layers", 0) for i in layers):
            raise ConfigError(
                f"draft={draft}: the {self.method} head fuses layers {layers}, target "
                f"{target} has {t.get('num_hidden_layers')}"
            )
        architectures = tuple(t.get("architectures") or ())
        if self.host_interface and target_hosts(architectures, self.host_interface) is False:
            raise ConfigError(
                f"variant.method={self.method}: vLLM's {'/'.join(architectures)} (target "
                f"{target}) cannot host {self.method} heads"
            )
        drafts = h.get("draft_vocab_size") or vocab
        shapes = " (the target's shapes from its base)" if target_config else ""
        return (
            f"{self.method} head matches the target: hidden size {width}, vocab {vocab} "
            f"(drafts {drafts}){shapes}"
        )


class Eagle(Head):
    method = "eagle"
    what = "an EAGLE head (checkpoint only)"
    host_interface = "supports_eagle"


class Medusa(Head):
    method = "medusa"
    what = "Medusa heads (checkpoint only)"


class DFlash(Head):
    method = "dflash"
    what = "a DFlash head (checkpoint only)"


FAMILIES = (Eagle(), Medusa(), DFlash())
