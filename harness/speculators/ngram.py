"""Prompt lookup (``ngram``): model-free drafts copied from the context after an n-gram
match; it drafts only where it finds one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.speculators.base import Speculator


@dataclass
class NgramOptions:
    """``spec.prompt_lookup_*``: the n-gram lengths matched against the context."""

    prompt_lookup_max: int = 4  # longest n-gram matched against the context
    prompt_lookup_min: int = 2  # shortest


class Ngram(Speculator):
    method = "ngram"
    Options = NgramOptions
    what = "prompt lookup, model-free"
    loads_checkpoint = False
    drafts_every_step = False
    samples_drafts = False
    # vLLM's proposer loads numba's llvmlite, after which no engine starts in that process
    # (vLLM's kernel registration trips over llvmlite's module wrapper)
    needs_multiprocessing = True

    def options(self, spec: Any) -> dict[str, Any]:
        return {
            "prompt_lookup_max": spec.prompt_lookup_max,
            "prompt_lookup_min": spec.prompt_lookup_min,
        }

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        low, high = cfg.spec.prompt_lookup_min, cfg.spec.prompt_lookup_max
        if not 1 <= low <= high:
            raise ConfigError(
                f"spec.prompt_lookup_min={low}: must be between 1 and spec.prompt_lookup_max={high}"
            )


FAMILY = Ngram()
