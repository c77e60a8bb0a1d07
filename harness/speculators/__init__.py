"""Speculator families, one module each (``FAMILY`` or ``FAMILIES`` in it), found here by
module scan: adding a family is adding its module.

``get(method)`` is a family by vLLM method name, ``METHODS`` every name, ``of(variant)`` a
job's, ``of_checkpoint(path)`` the family a checkpoint on disk belongs to.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from harness.checks import model_config
from harness.errors import ConfigError
from harness.speculators.base import Speculator


def _discover() -> dict[str, Speculator]:
    found: dict[str, Speculator] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"):
        loaded = importlib.import_module(f"{__name__}.{module}")
        for family in getattr(loaded, "FAMILIES", ()) or (getattr(loaded, "FAMILY", None),):
            if family is not None:
                found[family.method] = family
    return found


FAMILIES = _discover()
METHODS = tuple(FAMILIES)


def get(method: str) -> Speculator:
    """The family of vLLM method ``method``.

    Raises:
        ConfigError: an unknown method, naming the known ones.
    """
    if method not in FAMILIES:
        raise ConfigError(f"variant.method={method}: must be one of {', '.join(METHODS)}")
    return FAMILIES[method]


def of(variant: Any) -> Speculator:
    """The family of a variant config (its ``method``)."""
    return get(variant.method)


def can_speculate(variant: Any) -> bool:
    """Whether a variant can run at spec.k > 0: a checkpoint, or a model-free method."""
    return of(variant).can_speculate(variant.draft)


def of_checkpoint(path: str) -> Speculator:
    """The family a checkpoint on disk belongs to (its config.json), first that recognises it.

    Raises:
        ConfigError: no family recognises it.
    """
    config = model_config(path) or {}
    for family in FAMILIES.values():
        if family.recognises(config):
            return family
    raise ConfigError(f"draft={path}: no speculator family recognises its config.json")


__all__ = ["FAMILIES", "METHODS", "Speculator", "can_speculate", "get", "of", "of_checkpoint"]
