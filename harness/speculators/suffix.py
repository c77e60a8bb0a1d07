"""Suffix decoding (``suffix``, Arctic Inference): model-free drafts from suffix trees over
the prompt and over earlier responses; it drafts only where a suffix matches."""

from __future__ import annotations

import importlib.util
from typing import Any

from harness.errors import ConfigError
from harness.speculators.base import Speculator

PACKAGE = "arctic_inference"


def installed() -> bool:
    """Whether the suffix trees' package is importable."""
    return importlib.util.find_spec(PACKAGE) is not None


class Suffix(Speculator):
    method = "suffix"
    what = "suffix decoding over the prompt and earlier responses, model-free"
    loads_checkpoint = False
    drafts_every_step = False
    samples_drafts = False
    follows_k_schedule = False  # vLLM's suffix proposer asserts the K it was started with

    def options(self, spec: Any) -> dict[str, Any]:
        return {}  # vLLM's defaults for the trees (depth 24, 10,000 cached requests)

    def plan_check(
        self, target: str, draft: str | None, target_config: dict | None = None
    ) -> str | None:
        if not installed():
            raise ConfigError(
                f"variant.method=suffix: the {PACKAGE} package is not installed; "
                "run `make install-suffix` (a C++ build)"
            )
        return f"{PACKAGE} is installed"


FAMILY = Suffix()
