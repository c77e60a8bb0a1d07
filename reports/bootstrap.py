"""Percentile bootstrap over problems for ratio-of-sums statistics.

Every statistic of the report is a ratio of sums over requests: accuracy = correct / n,
acceptance rate = accepted / proposed, mean TPOT = sum of TPOTs / requests with a TPOT,
and so on. Requests are first summed per problem (seeds and repeats pool into their
problem), then problems are resampled with replacement: a replicate is the ratio of
count-weighted sums, ``(W @ num) / (W @ den)`` with W the (replicates x problems) matrix
of multinomial counts. All statistics of a group share the same W, and two groups
compared with :func:`paired` share it too (a paired bootstrap over their problems).

The matrix W depends only on the number of problems and the report seed
(:func:`weights`), so a group's interval does not depend on which other groups were
loaded, and W is drawn once per group size rather than once per group.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

N_BOOT = 1000  # replicates
LEVEL = 0.95  # two-sided coverage of the percentile interval


@functools.lru_cache(maxsize=8)
def weights(n_units: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_units) counts: how often each unit is drawn in each replicate (read-only)."""
    rng = np.random.default_rng([seed, n_units])
    draws = rng.integers(0, n_units, (n_boot, n_units)) + n_units * np.arange(n_boot)[:, None]
    w = np.bincount(draws.ravel(), minlength=n_boot * n_units).reshape(n_boot, n_units) * 1.0
    w.flags.writeable = False
    return w


def _interval(replicates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tail = 100 * (1 - LEVEL) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN bounds
        lo, hi = np.nanpercentile(replicates, [tail, 100 - tail], axis=0)
    return lo, hi


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def ratio(
    num: np.ndarray, den: np.ndarray, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Point estimate and interval of sum(num) / sum(den), column by column.

    Args:
        num, den: (problems, statistics) per-problem sums.
    Returns:
        (point, lo, hi), each of length ``statistics``; NaN where the denominator is 0.
    """
    w = weights(len(num), n_boot, seed)
    lo, hi = _interval(_ratio(w @ num, w @ den))
    return _ratio(num.sum(0), den.sum(0)), lo, hi


def paired(
    x: tuple[np.ndarray, np.ndarray],
    y: tuple[np.ndarray, np.ndarray],
    how: str,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compare two groups measured on the same problems: y / x or y - x of their ratios.

    Args:
        x, y: (num, den) per-problem sums, rows aligned on the same problems (a problem
            one group lacks has zeros there).
        how: ``"ratio"`` (y / x, e.g. a speedup) or ``"difference"`` (y - x).
    Returns:
        (point, lo, hi) of the comparison, column by column.
    """
    if how not in ("ratio", "difference"):
        raise ValueError(f"how={how!r}: use 'ratio' or 'difference'")
    w = weights(len(x[0]), n_boot, seed)
    mx, my = _ratio(w @ x[0], w @ x[1]), _ratio(w @ y[0], w @ y[1])
    px, py = _ratio(x[0].sum(0), x[1].sum(0)), _ratio(y[0].sum(0), y[1].sum(0))
    if how == "ratio":
        lo, hi = _interval(_ratio(my, mx))
        return _ratio(py, px), lo, hi
    lo, hi = _interval(my - mx)
    return py - px, lo, hi
