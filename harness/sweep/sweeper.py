"""Planning a multirun: which of the composed combinations run, and in what order.

The Hydra plugin (``hydra_plugins/draftbench_sweeper``) composes every combination of the
grid and hands them to :func:`plan`, which drops K > 0 for a variant without a speculator,
what-if combinations that set a longer acceptance than K + 1, and the K = 0 jobs that repeat a speculator-less twin's baseline, and orders the jobs by
target, then engine spec (K = 0 first, dataset fastest). The rules: Sweeps in
docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from harness.backends.engine import EngineSpec
from harness.config import ConfigError, validate
from harness.files import json_digest
from harness.results import config_hash, job_name, resolved_config
from harness.speculators import can_speculate


@dataclass(frozen=True)
class Plan:
    """The jobs to launch, in order, and what was dropped."""

    jobs: list[list[str]]
    no_draft: int
    duplicate_baselines: int
    beyond_k: int = 0  # what-if combinations accepting more tokens than a step can

    def note(self) -> str | None:
        """One line on the dropped combinations; None when nothing was dropped."""
        dropped = self.no_draft + self.duplicate_baselines + self.beyond_k
        if not dropped:
            return None
        beyond = (
            f"; {self.beyond_k} with spec.synthetic_acceptance_length above spec.k + 1"
            if self.beyond_k
            else ""
        )
        return (
            f"sweep: running {len(self.jobs)} of {len(self.jobs) + dropped} combinations; dropped "
            f"{self.no_draft} with spec.k>0 for a variant without a draft and "
            f"{self.duplicate_baselines} k=0 runs of speculative variants that repeat their "
            f"draftless variant's baseline{beyond}"
        )


def _beyond_k(cfg: Any) -> bool:
    """A what-if combination whose acceptance length exceeds K + 1 (a grid of K x length)."""
    length = cfg.spec.synthetic_acceptance_length
    return cfg.spec.k > 0 and length is not None and length > cfg.spec.k + 1


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _baseline_identity(cfg: Any) -> str:
    """What a k = 0 job computes: its config with the variant reduced to target and style."""
    config = resolved_config(cfg)
    config["variant"] = {"target": cfg.variant.target, "prompt_style": cfg.variant.prompt_style}
    return json_digest(config, length=None)


def _check_unique_names(jobs: Sequence[tuple[list[str], Any]]) -> None:
    seen: dict[str, tuple[str, list[str]]] = {}
    for overrides, cfg in jobs:
        name, digest = job_name(cfg), config_hash(cfg)
        if name in seen and seen[name][0] != digest:
            raise ConfigError(
                f"sweep: jobs {' '.join(seen[name][1])} and {' '.join(overrides)} would both "
                f"write {name}; sweep the other key in separate sweeps (sweep=<name>)"
            )
        seen[name] = (digest, overrides)


def plan(jobs: Sequence[tuple[Sequence[str], Any]]) -> Plan:
    """Filter and order ``(overrides, composed config)`` pairs (see the module docstring).

    Raises:
        ConfigError: any combination has a bad value (checked before dropping), none is
            left to run, or two kept combinations
            differ only in keys the job name leaves out (they would share a directory).
    """
    for _, cfg in jobs:  # every combination, the ones dropped below too
        dropped = cfg.spec.k > 0 and not can_speculate(cfg.variant)
        if dropped:
            cfg = OmegaConf.merge(cfg, {"spec": {"k": 0, "synthetic_acceptance_length": None}})
        elif _beyond_k(cfg):
            cfg = OmegaConf.merge(cfg, {"spec": {"synthetic_acceptance_length": None}})
        validate(cfg)
    possible = [(o, c) for o, c in jobs if not _beyond_k(c)]
    runnable = [(list(o), c) for o, c in possible if c.spec.k == 0 or can_speculate(c.variant)]
    draftless = {
        _baseline_identity(c) for _, c in runnable if c.spec.k == 0 and not can_speculate(c.variant)
    }
    kept = [
        (o, c)
        for o, c in runnable
        if not (c.spec.k == 0 and can_speculate(c.variant) and _baseline_identity(c) in draftless)
    ]

    if not kept:
        raise ConfigError(
            f"sweep: none of its {len(jobs)} combinations can run (spec.k>0 needs a variant "
            "with a draft model or a model-free method); nothing to do"
        )
    _check_unique_names(kept)
    first: dict[Any, int] = {}

    def rank(value: Any) -> int:
        return first.setdefault(value, len(first))

    keyed = []
    for overrides, cfg in kept:
        spec = EngineSpec.from_config(cfg)
        rest = tuple(o for o in overrides if _key(o) != "dataset")
        keyed.append(
            (
                (
                    rank(("target", spec.target)),
                    spec.k > 0,
                    rank(("spec", spec)),
                    rank(("rest", rest)),
                    rank(("data", cfg.dataset.name)),
                ),
                overrides,
            )
        )
    ordered = [overrides for _, overrides in sorted(keyed, key=lambda item: item[0])]
    return Plan(
        jobs=ordered,
        no_draft=len(possible) - len(runnable),
        duplicate_baselines=len(runnable) - len(kept),
        beyond_k=len(jobs) - len(possible),
    )
