"""How a job's requests arrive: closed-loop concurrency or open-loop request rates.

A :class:`Load` says how many requests may be in flight and, for open-loop load, the
mean request rate and the burstiness of the arrivals; :func:`send_times` turns it into
each request's send time. The backends only wait for those times; neither knows how
they were drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Load:
    """At most ``concurrency`` requests in flight; with ``request_rate`` (requests/s, inf =
    all at once) arrivals are open-loop, else a request starts as soon as one finishes."""

    concurrency: int
    request_rate: float | None = None
    burstiness: float = 1.0  # gaps ~ Gamma(shape=burstiness): 1 = Poisson, larger = steadier
    seed: int = 0  # of the arrival draws


def send_times(n: int, load: Load) -> np.ndarray:
    """Seconds from the first send to each of ``n`` sends (0 for closed loop or an infinite
    rate), drawn as ``vllm bench serve`` draws them: gamma gaps of mean 1 / rate, scaled so
    the last send comes at ``n / rate``."""
    rate = load.request_rate
    if n == 0 or rate is None or math.isinf(rate):
        return np.zeros(n)
    rng = np.random.default_rng(load.seed)
    gaps = rng.gamma(shape=load.burstiness, scale=1.0 / (rate * load.burstiness), size=n)
    times = np.cumsum(gaps)
    times = times * (n / rate) / times[-1]
    if not np.isfinite(times).all():
        raise ValueError(
            f"send times not finite at request_rate={rate}, burstiness={load.burstiness}"
        )
    return times
