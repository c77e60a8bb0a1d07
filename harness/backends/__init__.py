"""Where requests run: offline vLLM engines, vLLM servers, the one cache of live backends,
their process watchdog, arrival processes and the memory check.

``of(cfg)`` is a job's :class:`harness.backends.base.Backend`, ``NAMES`` the values of
``backend``, :func:`streamed` whether a backend's rows were served under a load.
"""

from __future__ import annotations

from typing import Any

from harness.backends.base import Backend
from harness.errors import ConfigError

# the values of ``backend``: ``offline.ENGINES.name``, ``server.STARTED.name``
NAMES = ("offline", "server")
STREAMED = ("server",)  # their requests stream from a server at a load: rates, goodput, ITL


def streamed(name: str) -> bool:
    """True when the rows of backend ``name`` were streamed from a server at a load (what
    ``reports.serving`` reads)."""
    return name in STREAMED


def of(cfg: Any) -> Backend:
    """The backend of a composed job config: ``backend``, and for a server whether it is
    reached at ``server.url``.

    Raises:
        ConfigError: an unknown ``backend``, naming the known ones.
    """
    # imported here: ``python -m harness.backends.reaper`` (the watchdog) imports this package
    # first, and must not find itself imported by it already
    from harness.backends.offline import ENGINES
    from harness.backends.server import AT_URL, STARTED

    if cfg.backend == ENGINES.name:
        return ENGINES
    if cfg.backend == STARTED.name:
        return AT_URL if cfg.server.url else STARTED
    raise ConfigError(f"backend={cfg.backend}: must be one of {', '.join(NAMES)}")


__all__ = ["NAMES", "STREAMED", "Backend", "of", "streamed"]
