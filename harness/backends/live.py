"""The live backends of this process: one cache of the offline ``vllm.LLM`` engines
(:mod:`harness.backends.engine`) and vLLM servers (:mod:`harness.backends.server`) it started, keyed by
(kind, spec), so the jobs of a multirun that share a spec reuse them. :func:`get_all`
keeps the backends a job asks for (a spec listed twice gets two), stops every other one
first (any kind's, and any that died) so its memory returns, then starts the missing ones,
the first spec last; :func:`instance` asks for those of one of a job's engine instances;
:func:`clear` stops them all; :func:`backends` lists those of a kind. A kind says only how to start and stop
one of its backends; this module imports nothing of the project.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def _running(backend: Any) -> bool:
    return True


@dataclass(frozen=True)
class Kind:
    """One kind of backend: its name, ``start(spec, same, **options)`` (``same``: how many
    backends of this kind and spec already run), ``stop(backend)``, and whether a backend
    still runs (one that died is stopped and started again when asked for)."""

    name: str
    start: Callable[..., Any]
    stop: Callable[[Any], None]
    running: Callable[[Any], bool] = _running


@dataclass(frozen=True, eq=False)  # entries compare by identity
class _Entry:
    kind: Kind
    spec: Any
    backend: Any


class Live:
    """Live backends keyed by (kind, spec), kept, stopped and started by one rule."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._launches: Counter[str] = Counter()

    def launches(self, kind: Kind) -> int:
        """Backends of ``kind`` started so far."""
        return self._launches[kind.name]

    def backends(self, kind: Kind) -> list[Any]:
        """The live backends of ``kind`` (one being stopped has already left the cache)."""
        return [e.backend for e in self._entries if e.kind.name == kind.name]

    def get(self, kind: Kind, spec: Any, **options: Any) -> tuple[Any, bool]:
        """:meth:`get_all` of one spec."""
        return self.get_all(kind, (spec,), **options)[0]

    def get_all(self, kind: Kind, specs: Sequence[Any], **options: Any) -> list[tuple[Any, bool]]:
        """One live backend of ``kind`` per entry of ``specs`` (a spec listed twice gets two
        instances) and whether each was reused. Backends that died and those not asked for
        (of any kind) stop first, so their memory returns before a new one starts; the
        missing ones start with ``options``, the first spec last."""
        for dead in [e for e in self._entries if not e.kind.running(e.backend)]:
            self._entries.remove(dead)
            dead.kind.stop(dead.backend)
        out: list[tuple[Any, bool] | None] = []
        free = list(self._entries)
        for spec in specs:
            found = next((e for e in free if e.kind.name == kind.name and e.spec == spec), None)
            if found is not None:
                free.remove(found)
            out.append(None if found is None else (found.backend, True))
        for stale in free:
            self._entries.remove(stale)
            stale.kind.stop(stale.backend)
        # the first spec starts last: a new engine unregisters the Prometheus counters of the
        # engines before it (vLLM keeps one set per process), and the job reads its own
        for i in reversed(range(len(specs))):
            if out[i] is None:
                same = sum(e.kind.name == kind.name and e.spec == specs[i] for e in self._entries)
                backend = kind.start(specs[i], same, **options)
                self._entries.append(_Entry(kind, specs[i], backend))
                self._launches[kind.name] += 1
                out[i] = (backend, False)
        return [item for item in out if item is not None]

    def instance(
        self, kind: Kind, specs: Sequence[Any], index: int, fresh: bool, **options: Any
    ) -> list[tuple[Any, bool]]:
        """The live backends of a job's engine instance ``index`` (its own spec first) and
        whether each was reused; ``fresh``: none kept from before, started in alternating
        order (the job's own last at even instances, first at odd ones)."""
        if fresh:
            self.clear()
        flip = index % 2 == 1
        got = self.get_all(kind, specs[::-1] if flip else specs, **options)
        return got[::-1] if flip else got

    def clear(self, kind: Kind | None = None) -> None:
        """Stop every live backend (of ``kind`` only, when given)."""
        stopping = [e for e in self._entries if kind is None or e.kind.name == kind.name]
        self._entries = [e for e in self._entries if e not in stopping]
        for entry in stopping:
            entry.kind.stop(entry.backend)


CACHE = Live()  # this process's one cache
get, get_all, instance = CACHE.get, CACHE.get_all, CACHE.instance
clear, launches, backends = CACHE.clear, CACHE.launches, CACHE.backends
