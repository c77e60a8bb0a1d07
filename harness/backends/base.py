"""What every backend answers: :class:`Backend`, a kind of place requests run (offline
engines, servers started here, a server at a URL), and :class:`Generator`, one live engine
or server of it that turns prompts into completions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from harness import metrics
from harness.backends.arrivals import Load
from harness.records import Completion


class Generator(Protocol):
    """One live engine or server: ``harness.backends.offline.Offline`` or
    ``harness.backends.server.Server``."""

    start_s: float  # seconds it took to start (0 for one this process did not start)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: Any,
        load: Load,
        on_output: Callable[[int, Completion], None],
    ) -> None:
        """Generate every prompt at ``load``, calling ``on_output(index, completion)`` as
        each request finishes."""

    def spec_counts(self) -> metrics.SpecCounts | None:
        """The engine's global speculative-decoding counters (None without speculation)."""

    def pause(self) -> None:
        """Spend no CPU until :meth:`resume` (a side of a pair out of its window); a no-op
        where the harness does not own the processes."""

    def resume(self) -> None:
        """Run again after :meth:`pause` (a no-op when not paused)."""


class Backend(ABC):
    """A kind of backend: its config rules, its part of a job's name, how ``plan=true``
    shows an engine's start, and the live generators of a job's engine instance."""

    name: str  # the config's ``backend`` value
    run_name: str = ""  # its part of a job's name (``harness.results.job_name``)
    # its live engines share this process's one set of vLLM counters: an engine started after
    # the job's resets the job's
    shares_counters: bool = False

    def validate(self, cfg: Any) -> None:
        """Its rules of a composed config (none unless it has some).

        Raises:
            ConfigError: a value it cannot run, in one line naming it.
        """
        return None

    def alone(self, cfg: Any) -> str | None:
        """Why an interleaved job on it can have no baseline beside it, or None."""
        return None

    @abstractmethod
    def launch_lines(self, spec: Any, cfg: Any) -> list[str]:
        """How an engine of ``spec`` starts, as ``plan=true`` prints it (indented lines)."""

    @abstractmethod
    def instance(
        self, cfg: Any, specs: tuple[Any, ...], index: int, logs: Path
    ) -> list[tuple[Generator, bool]]:
        """The live generators of a job's engine instance ``index`` (``specs``: its own,
        then its baseline's when interleaved), its own first, and whether each was reused;
        at ``cfg.instances`` > 1 none kept from before. Asking for them stops every other
        live backend (:mod:`harness.backends.live`). ``logs``: where a started server writes
        its log."""

    @abstractmethod
    def launches(self) -> int:
        """Engines or servers of its kind this process has started so far."""

    def beside(self, spec: Any, plain: Any) -> Any:
        """The plain engine spec an interleaved job of ``spec`` runs beside: ``plain`` as
        this backend lays it out there (as it is, unless the backend says otherwise)."""
        return plain

    def timed(self, spec: Any) -> Any:
        """The engine spec a calibration times to price this backend's steps: ``spec`` laid
        out as this backend runs it (its own, offline)."""
        return spec

    def in_process(self, generator: Generator) -> Any | None:
        """The ``vllm.LLM`` behind ``generator`` when it steps in this process (calibration
        and the drift sentinel time its steps), else None."""
        return None
