"""What every speculator family answers for its vLLM method (``SpeculativeConfig.method``).

A family is a module of this package holding one :class:`Speculator` (``FAMILY``) or a
few (``FAMILIES``); :mod:`harness.speculators` finds them, and no other module branches on
a method name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from harness import schedule
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
    # runs in processes of its own even where engines run in the harness's
    # (``engine.multiprocessing=false``)
    needs_multiprocessing: ClassVar[bool] = False
    unbuilt_layers: ClassVar[int | None] = None  # a checkpoint not built yet: target layers
    # drafts at any K up to ``spec.k`` (vLLM's per-batch-size K, ``spec.k_schedule``, and
    # speculation off, the schedule at K = 0 that the calibration times)
    follows_k_schedule: ClassVar[bool] = True
    # the module of ``train/`` whose ``build`` makes its checkpoints in ``make models``
    # (its interface: ``train.steps``); None: model-free, or its checkpoints are made elsewhere
    trained_by: ClassVar[str | None] = None
    # a dataclass of the family's own keys of the ``spec`` config group (``spec.<key>``,
    # composed into the schema by :func:`harness.speculators.spec_schema`); None: none
    Options: ClassVar[type | None] = None

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
        if not self.follows_k_schedule and cfg.spec.k_schedule:
            seqs, k = cfg.engine.max_num_seqs, cfg.spec.k
            if any(schedule.k_at(cfg.spec.k_schedule, k, seqs, b) != k for b in range(1, seqs + 1)):
                raise ConfigError(
                    f"spec.k_schedule={cfg.spec.k_schedule}: method {self.method} drafts only "
                    f"at spec.k={k} (vLLM's {self.method} proposer takes no other K); set "
                    "spec.k_schedule=null"
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

    def describe(self, config: dict[str, Any]) -> str:
        """A few words on a checkpoint of this family (its config.json), for tables."""
        return f"{config.get('num_hidden_layers', '?')} layers"

    # pre-flight acceptance (:mod:`harness.measure.preflight`): a draft's greedy agreement
    # with a K = 0 run's tokens, per position (a chain family: per chain start and depth)

    def replay_model(self, draft: str) -> Any:
        """The checkpoint loaded for its teacher-forced pre-flight pass."""
        raise ConfigError(f"draft={draft}: method {self.method} has no pre-flight replay")

    def agreement(self, model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> list[bool]:
        """Whether the family's greedy draft of each token of ``tokens`` from the second,
        after ``prompt``, equals it."""
        raise NotImplementedError

    def replay(
        self, model: Any, target: Teacher, prompt: Sequence[int], output: Sequence[int], depth: int
    ) -> tuple[list[Any], list[bool]]:
        """A request's agreement over its output, and past its end (over the target's next
        tokens) where a verify step of the run's Ks would read them."""
        agree = self.agreement(model, prompt, output)
        if not target.past_end(agree):
            return agree, []
        whole = self.agreement(model, prompt, [*output, *target.more()])
        return agree, whole[len(agree) :]

    def firsts(self, agree: list[Any]) -> list[bool]:
        """A request's agreement of the first draft of a step at each place a step starts."""
        return list(agree)

    def encode(self, agree: list[Any], depth: int) -> str | list[str]:
        """A request's agreement as ``preflight.json`` stores it ("1"/"0" per position)."""
        return bits(agree)


class Teacher(Protocol):
    """What a pre-flight replay may ask of the target, for one request."""

    def model(self) -> Any:
        """The target's causal LM (loaded once, when first asked)."""

    def more(self) -> list[int]:
        """The target's greedy tokens after the request's output (past its end)."""

    def past_end(self, agree: Sequence[bool]) -> bool:
        """Whether a verify step at one of the run's Ks would read past the output's end."""


def bits(vector: Sequence[bool]) -> str:
    """A vector of agreements as a string of "1" and "0"."""
    return "".join("1" if x else "0" for x in vector)
