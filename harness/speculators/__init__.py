"""Speculator families, one module each (``FAMILY`` or ``FAMILIES`` in it), found here by
module scan: adding a family is adding its module.

``get(method)`` is a family by vLLM method name, ``METHODS`` every name, ``of(variant)`` a
job's, ``of_checkpoint(path)`` the family a checkpoint on disk belongs to, and
``spec_schema`` the ``spec`` config group with every family's own keys.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing
from collections.abc import Iterable
from typing import Any

from harness.checks import model_config
from harness.errors import ConfigError
from harness.speculators.base import Speculator


def register(modules: Iterable[Any]) -> dict[str, Speculator]:
    """The families of ``modules`` (``FAMILY`` or ``FAMILIES`` in each) by method.

    Raises:
        ValueError: two families claim one method.
    """
    found: dict[str, Speculator] = {}
    for module in modules:
        for family in getattr(module, "FAMILIES", ()) or (getattr(module, "FAMILY", None),):
            if family is None:
                continue
            if family.method in found:
                raise ValueError(
                    f"speculator method {family.method!r} is defined twice: by "
                    f"{type(found[family.method]).__module__} and {module.__name__}"
                )
            found[family.method] = family
    return found


FAMILIES = register(
    importlib.import_module(f"{__name__}.{m.name}")
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
    if m.name != "base"
)
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
    """The one family that recognises a checkpoint on disk (its config.json).

    Raises:
        ConfigError: no family recognises it, or more than one does.
    """
    config = model_config(path) or {}
    claimed = [family for family in FAMILIES.values() if family.recognises(config)]
    if len(claimed) != 1:
        which = ", ".join(f.method for f in claimed) or "no speculator family"
        raise ConfigError(f"draft={path}: {which} recognise(s) its config.json; expected one")
    return claimed[0]


def spec_schema(shared: type, families: Iterable[Speculator] = ()) -> type:
    """The ``spec`` config group's schema (a dataclass named ``SpecConfig``): the fields of
    the dataclass ``shared``, then each family's ``Options``.

    Raises:
        ValueError: two of them declare one key.
    """
    owner: dict[str, str] = {}
    fields = []
    for source in (shared, *(f.Options for f in families if f.Options is not None)):
        hints = typing.get_type_hints(source)
        for f in dataclasses.fields(source):
            if f.name in owner:
                raise ValueError(
                    f"spec.{f.name} is declared twice: by {owner[f.name]} and "
                    f"{source.__module__}.{source.__qualname__}"
                )
            owner[f.name] = f"{source.__module__}.{source.__qualname__}"
            default = (
                {"default_factory": f.default_factory}
                if f.default is dataclasses.MISSING
                else {"default": f.default}
            )
            fields.append((f.name, hints[f.name], dataclasses.field(**default)))
    schema = dataclasses.make_dataclass("SpecConfig", fields)
    schema.__module__, schema.__doc__ = shared.__module__, shared.__doc__
    return schema


__all__ = [
    "FAMILIES",
    "METHODS",
    "Speculator",
    "can_speculate",
    "get",
    "of",
    "of_checkpoint",
    "register",
    "spec_schema",
]
