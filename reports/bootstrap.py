"""BCa bootstrap over problems (and engine instances) for ratio-of-sums statistics.

Requests are summed per problem, then problems resampled: a replicate is
``(W @ num) / (W @ den)`` with W the (replicates x problems) matrix of counts
(:func:`weights`, drawn once per problem count, instances and seed), shared by every
statistic of a group and by both groups of :func:`paired`. When the problems were split
over several engine instances, W has two levels: instances drawn with replacement, then
each drawn instance's problems. Comparisons over few units that the caller summed into
one row each (an interleaved run's pairing windows, ``reports.aggregate.compare``) take
:func:`jackknife_t` instead. Intervals are BCa (Efron 1987), computed here rather than
by scipy so that W stays shared; ``dropped`` counts replicates with a zero denominator.
Definitions: docs/METRICS.md.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

N_BOOT = 1000  # replicates
LEVEL = 0.95  # two-sided coverage of the interval


@functools.lru_cache(maxsize=8)
def weights(
    n_units: int, n_boot: int, seed: int, instances: tuple[int, ...] | None = None
) -> np.ndarray:
    """(n_boot, n_units) counts: how often each unit is drawn in each replicate (read-only).

    ``instances``: each unit's engine instance; with two or more, a replicate draws as many
    instances with replacement, then each drawn instance's units with replacement.
    """
    rng = np.random.default_rng([seed, n_units])
    ids, labels = np.unique(instances if instances is not None else [0], return_inverse=True)
    if len(ids) < 2:
        draws = rng.integers(0, n_units, (n_boot, n_units))
        rows = np.broadcast_to(np.arange(n_boot)[:, None], draws.shape)
    else:
        copies = rng.multinomial(len(ids), np.full(len(ids), 1 / len(ids)), size=n_boot)
        parts = []
        for j in range(len(ids)):
            members = np.flatnonzero(labels == j)
            width = copies[:, j].max() * len(members)
            draws = rng.integers(0, len(members), (n_boot, width))
            kept = np.arange(width) < (copies[:, j] * len(members))[:, None]
            parts.append((np.nonzero(kept)[0], members[draws[kept]]))
        rows, draws = (np.concatenate(x) for x in zip(*parts, strict=True))
    flat = (draws + n_units * rows).ravel()
    w = np.bincount(flat, minlength=n_boot * n_units).reshape(n_boot, n_units) * 1.0
    w.flags.writeable = False
    return w


def _interval(
    replicates: np.ndarray, point: np.ndarray, jackknife: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """BCa bounds per column of (replicates, statistics), from the point estimates and the
    (problems, statistics) leave-one-out estimates; NaN replicates are left out."""
    from scipy.stats import norm

    tail = (1 - LEVEL) / 2
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN bounds
        valid = (~np.isnan(replicates)).sum(0)
        below = (replicates < point).sum(0) + 0.5 * (replicates == point).sum(0)
        z0 = norm.ppf(below / valid)
        d = np.nanmean(jackknife, 0) - jackknife
        a = np.nansum(d**3, 0) / (6 * np.nansum(d**2, 0) ** 1.5)
        a = np.where(np.isfinite(a), a, 0.0)
        z = norm.ppf([tail, 1 - tail])[:, None]
        q = norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
        q = np.where(np.isfinite(q), q, [[tail], [1 - tail]])  # BCa undefined: percentile
        lo, hi = (
            np.array([np.nanquantile(replicates[:, j], q[i, j]) for j in range(point.size)])
            for i in (0, 1)
        )
    return lo, hi


def dropped(
    den: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, instances: tuple[int, ...] | None = None
) -> np.ndarray:
    """Replicates with a zero denominator per column of (problems, statistics) ``den``
    (left out of the interval)."""
    return (weights(len(den), n_boot, seed, instances) @ den == 0).sum(0)


def _jackknife(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """(problems, statistics) ratios of the sums without each problem in turn."""
    return _ratio(num.sum(0) - num, den.sum(0) - den)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def ratio(
    num: np.ndarray,
    den: np.ndarray,
    n_boot: int = N_BOOT,
    seed: int = 0,
    instances: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point estimate and interval of sum(num) / sum(den), column by column.

    Args:
        num, den: (problems, statistics) per-problem sums.
        instances: each problem's engine instance (:func:`weights`).
    Returns:
        (point, lo, hi), each of length ``statistics``; NaN where the denominator is 0.
    """
    w = weights(len(num), n_boot, seed, instances)
    point = _ratio(num.sum(0), den.sum(0))
    lo, hi = _interval(_ratio(w @ num, w @ den), point, _jackknife(num, den))
    return point, lo, hi


def jackknife_t(
    x: tuple[np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray], how: str
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of :func:`paired`'s comparison from the leave-one-unit-out estimates, with
    Student t critical values on units - 1 degrees of freedom (a ratio on the log scale):
    the cluster jackknife, for comparisons over few units (Cameron and Miller 2015),
    where a bootstrap over them comes out too narrow. NaN with fewer than two units."""
    from scipy.stats import t

    units = len(x[0])
    px, py = _ratio(x[0].sum(0), x[1].sum(0)), _ratio(y[0].sum(0), y[1].sum(0))
    jx, jy = _jackknife(*x), _jackknife(*y)
    with np.errstate(divide="ignore", invalid="ignore"):
        point, loo = (np.log(_ratio(py, px)), np.log(_ratio(jy, jx))) if how == "ratio" else (
            py - px, jy - jx)  # fmt: skip
        spread = np.sqrt((units - 1) / units * ((loo - loo.mean(0)) ** 2).sum(0))
        half = t.ppf(1 - (1 - LEVEL) / 2, units - 1) * spread if units > 1 else np.nan * spread
    lo, hi = point - half, point + half
    return (np.exp(lo), np.exp(hi)) if how == "ratio" else (lo, hi)


def paired(
    x: tuple[np.ndarray, np.ndarray],
    y: tuple[np.ndarray, np.ndarray],
    how: str,
    n_boot: int = N_BOOT,
    seed: int = 0,
    instances: tuple[int, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compare two groups measured on the same problems: y / x or y - x of their ratios.

    Args:
        x, y: (num, den) per-problem sums, rows aligned on the same problems (a problem
            one group lacks has zeros there).
        how: ``"ratio"`` (y / x, e.g. a speedup) or ``"difference"`` (y - x).
        instances: each problem's engine instance (:func:`weights`).
    Returns:
        (point, lo, hi) of the comparison, column by column.
    """
    if how not in ("ratio", "difference"):
        raise ValueError(f"how={how!r}: use 'ratio' or 'difference'")
    w = weights(len(x[0]), n_boot, seed, instances)
    mx, my = _ratio(w @ x[0], w @ x[1]), _ratio(w @ y[0], w @ y[1])
    px, py = _ratio(x[0].sum(0), x[1].sum(0)), _ratio(y[0].sum(0), y[1].sum(0))
    jx, jy = _jackknife(*x), _jackknife(*y)
    if how == "ratio":
        point = _ratio(py, px)
        lo, hi = _interval(_ratio(my, mx), point, _ratio(jy, jx))
        return point, lo, hi
    lo, hi = _interval(my - mx, py - px, jy - jx)
    return py - px, lo, hi
