"""What every speculator family answers for its vLLM method (``SpeculativeConfig.method``).

A family is a module of this package holding one :class:`Speculator` (``FAMILY``) or a
few (``FAMILIES``); :mod:`harness.speculators` finds them, and no other module branches on
a method name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

from harness.errors import ConfigError


class Speculator:
    """A speculator family: its config rules, checks against the target, the options of its
    ``speculative_config``, its memory and calibration traits and its pre-flight replay."""

    method: ClassVar[str]
    what: ClassVar[str]  # a few words for ``--help`` and docs
    loads_checkpoint: ClassVar[bool] = True  # ``variant.draft``: a draft model or a head
    drafts_every_step: ClassVar[bool] = True  # False: proposes only where it finds a match
    samples_drafts: ClassVar[bool] = True  # takes ``spec.draft_sample_method``
    timed_as_target: ClassVar[bool] = False  # its checkpoint is calibrated alone (its c)
    unbuilt_layers: ClassVar[int | None] = None  # a checkpoint not built yet: target layers
    trained_by: ClassVar[str | None] = None  # the ``train`` module ``make models`` builds it with

    def options(self, spec: Any) -> dict[str, Any]:
        """The family's own keys of ``speculative_config`` from the ``spec`` config group."""
        return {"draft_sample_method": spec.draft_sample_method} if self.samples_drafts else {}

    def validate(self, cfg: Any) -> None:
        """Config-only rules of a composed job config (raises :class:`ConfigError`)."""
        if not self.loads_checkpoint and cfg.variant.draft is not None:
            raise ConfigError(
                f"variant.draft={cfg.variant.draft}: method {self.method} loads no draft "
                "model; set variant.draft=null"
            )

    def can_speculate(self, draft: str | None) -> bool:
        """Whether a variant with this ``draft`` (a key or None) can run at K > 0."""
        return draft is not None or not self.loads_checkpoint

    def plan_check(
        self, target: str, draft: str | None, target_config: dict | None = None
    ) -> str | None:
        """The checks against the target that read config.json files only, as one line for
        ``plan=true`` (None: nothing to say). ``target_config`` stands in for a target not
        built yet (its base's). Raises :class:`ConfigError` on a mismatch."""
        return None

    def check(self, target: str, draft: str | None) -> None:
        """Every check against the target before an engine starts (tokenizers included);
        a check skipped for want of a file prints why on stderr."""
        note = self.plan_check(target, draft)
        if note and "skipped" in note:
            print(note, file=sys.stderr)

    def unbuilt_base(self, cfg: Any) -> str | None:
        """The model whose architecture a checkpoint not built yet will have (memory)."""
        return None

    def recognises(self, config: dict[str, Any]) -> bool:
        """Whether a checkpoint's config.json is one of this family's."""
        return False

    # pre-flight acceptance (:mod:`harness.measure.preflight`); None: the family has no replay
    chains: ClassVar[bool | None] = None  # True: agreement per chain start and depth

    def replay_model(self, draft: str) -> Any:
        """The checkpoint loaded for its teacher-forced pre-flight pass."""
        raise ConfigError(f"draft={draft}: method {self.method} has no pre-flight replay")

    def agreement(
        self, model: Any, target: Any, prompt: Sequence[int], tokens: Sequence[int], depth: int
    ) -> list[bool] | list[list[bool]]:
        """Whether the family's greedy drafts equal ``tokens`` after ``prompt`` (per
        position, or per chain start and depth when :attr:`chains`)."""
        raise NotImplementedError
