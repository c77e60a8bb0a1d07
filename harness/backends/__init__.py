"""Where requests run: offline vLLM engines, vLLM servers, the one cache of live backends,
their process watchdog, arrival processes and the memory pre-flight.

``of(cfg)`` is a job's :class:`harness.backends.base.Backend`, ``NAMES`` the values of
``backend``.
"""

from __future__ import annotations

from typing import Any

from harness.backends.base import Backend
from harness.backends.offline import ENGINES
from harness.backends.server import AT_URL, STARTED
from harness.errors import ConfigError

NAMES = (ENGINES.name, STARTED.name)


def of(cfg: Any) -> Backend:
    """The backend of a composed job config: ``backend``, and for a server whether it is
    reached at ``server.url``.

    Raises:
        ConfigError: an unknown ``backend``, naming the known ones.
    """
    if cfg.backend == ENGINES.name:
        return ENGINES
    if cfg.backend == STARTED.name:
        return AT_URL if cfg.server.url else STARTED
    raise ConfigError(f"backend={cfg.backend}: must be one of {', '.join(NAMES)}")


__all__ = ["NAMES", "Backend", "of"]
