"""What every backend answers: :class:`Generator`, one live engine or server that turns
prompts into completions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
