"""Aggregates of the request table per (variant, dataset, K, concurrency), with 95% CIs.

A group is one configuration of one sweep (:data:`GROUP`); its seeds pool. Statistics
(:data:`RATIOS`) are ratios of sums with percentile-bootstrap intervals over problems
(:mod:`reports.bootstrap`). Speedups compare a group with the K = 0 runs of the same
target, prompt style, dataset, temperature and concurrency in the same sweep
(:data:`BASELINE`), by a paired bootstrap over their problems:

- speedup_tpot = baseline mean TPOT / mean TPOT
- speedup_e2e = baseline mean e2e latency / mean e2e latency
- speedup_tokens_per_s = tokens/s / baseline tokens/s (tokens/s = output tokens / e2e)

Per-request acceptance histograms give the per-position acceptance
(:func:`harness.metrics.position_counts`). Losslessness compares each greedy K > 0 run's
output hashes with its K = 0 run's (:func:`with_lossless`); a group's is its runs' mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from harness import metrics
from reports import bootstrap

GROUP = (
    "sweep_id", "target", "target_role", "variant", "draft", "prompt_style", "dataset",
    "difficulty",
    "temperature", "concurrency", "k",
)  # fmt: skip
BASELINE = tuple(c for c in GROUP if c not in ("variant", "draft", "k"))
RUN = ("sweep_id", "run_id")
# What fixes a greedy output: a K > 0 run should reproduce the K = 0 run that shares these.
SAME_OUTPUT = ("sweep_id", "target", "dataset", "prompt_style", "seed", "temperature", "max_tokens")
DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}
POSITION_COLUMNS = ("row", "position", "reached", "accepted")


@dataclass(frozen=True)
class Ratio:
    """A statistic sum(num) / sum(den) over requests, plus ``offset``."""

    name: str
    num: str
    den: str
    offset: float = 0.0


RATIOS = (
    Ratio("accuracy", "correct", "n"),
    Ratio("accuracy_strict", "correct_strict", "n_strict"),  # lm-eval strict-match
    Ratio("accuracy_flexible", "correct_flexible", "n_flexible"),  # lm-eval flexible-extract
    Ratio("output_tokens", "output_tokens", "n"),  # tokens
    Ratio("acceptance_rate", "num_accepted_tokens", "num_draft_tokens"),
    Ratio("mean_acceptance_length", "num_accepted_tokens", "num_spec_steps", 1.0),  # tokens/step
    Ratio("alpha", "num_accepted_tokens", "position_attempts"),  # MLE of per-token acceptance
    Ratio("ttft_s", "ttft_s", "n_ttft"),  # seconds
    Ratio("tpot_s", "tpot_s", "n_tpot"),  # seconds per token after the first
    Ratio("e2e_s", "e2e_s", "n"),  # seconds
    Ratio("tokens_per_s", "output_tokens", "e2e_s"),  # tokens per second of a request
)
# speedup name -> the time statistic whose baseline / variant ratio it is
SPEEDUPS = {
    "speedup_tpot": Ratio("tpot", "tpot_s", "n_tpot"),
    "speedup_e2e": Ratio("e2e", "e2e_s", "n"),
    "speedup_tokens_per_s": Ratio("s_per_token", "e2e_s", "output_tokens"),
}
SUMMED = tuple(dict.fromkeys(c for r in (*RATIOS, *SPEEDUPS.values()) for c in (r.num, r.den)))
_COL = {c: i for i, c in enumerate(SUMMED)}  # column of each summed statistic in a Block


def position_counts(histograms: pd.Series) -> pd.DataFrame:
    """Per request and draft position i = 1..K: steps that tried i and steps that passed it
    (:func:`harness.metrics.position_counts`, on the requests of each K at once).

    Returns:
        Columns ``row`` (position in ``histograms``), ``position``, ``reached``, ``accepted``;
        null histograms have no rows.
    """
    lists = pa.chunked_array(pa.array(histograms.array)).combine_chunks()
    lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    parts = [pd.DataFrame({c: np.zeros(0, np.int64) for c in POSITION_COLUMNS})]
    for n in np.unique(lengths[lengths > 1]):
        rows = np.flatnonzero(lengths == n)
        reached, accepted = metrics.position_counts(values[starts[rows, None] + np.arange(n)])
        parts.append(
            pd.DataFrame(
                {
                    "row": np.repeat(rows, n - 1),
                    "position": np.tile(np.arange(1, n), len(rows)),
                    "reached": reached.ravel(),
                    "accepted": accepted.ravel(),
                }
            )
        )
    counts = pd.concat(parts, ignore_index=True)
    return counts.sort_values(["row", "position"], kind="stable").reset_index(drop=True)


def with_sums(requests: pd.DataFrame) -> pd.DataFrame:
    """The request table plus the numeric columns :data:`SUMMED` names (nulls as 0) and
    ``problem_code``, the rank of ``problem_id`` (the bootstrap's unit)."""
    df = requests.copy()
    df["n"] = 1.0
    df["n_ttft"] = df["ttft_s"].notna().astype(float)
    df["n_tpot"] = df["tpot_s"].notna().astype(float)
    for way in ("strict", "flexible"):  # NaN in runs recorded before both verdicts
        verdict = df.get(f"correct_{way}", pd.Series(np.nan, index=df.index))
        df[f"correct_{way}"] = verdict
        df[f"n_{way}"] = verdict.notna().astype(float)
    pos = position_counts(df["acceptance_histogram"])
    df["position_attempts"] = np.bincount(pos["row"], weights=pos["reached"], minlength=len(df))
    for col in SUMMED:
        df[col] = df[col].astype(float).fillna(0.0)
    df["problem_code"] = pd.factorize(df["problem_id"], sort=True)[0]
    return df


@dataclass(frozen=True)
class Block:
    """Per-problem sums of one group: sorted problem codes and a (problems, SUMMED) array."""

    problems: np.ndarray
    values: np.ndarray

    def arrays(self, ratios: tuple[Ratio, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(num, den) columns of ``ratios``."""
        return self.values[:, [_COL[r.num] for r in ratios]], self.values[
            :, [_COL[r.den] for r in ratios]
        ]

    def on(self, problems: np.ndarray) -> Block:
        """The same sums laid out on ``problems`` (a sorted superset), zeros elsewhere."""
        values = np.zeros((len(problems), self.values.shape[1]))
        values[np.searchsorted(problems, self.problems)] = self.values
        return Block(problems, values)


def _labels(index: pd.Index) -> list[tuple]:
    return [k if isinstance(k, tuple) else (k,) for k in index]


def blocks(df: pd.DataFrame, keys: tuple[str, ...]) -> dict[tuple, Block]:
    """Group key -> :class:`Block` of :data:`SUMMED` per problem (seeds and repeats pool);
    ``df`` comes from :func:`with_sums`."""
    grouped = df.groupby(list(keys), sort=True, dropna=False)
    labels, gid = _labels(grouped.size().index), grouped.ngroup().to_numpy()
    sums = df[list(SUMMED)].groupby([gid, df["problem_code"].to_numpy()], sort=True).sum()
    values = sums.to_numpy(float)
    codes = sums.index.get_level_values(1).to_numpy()
    bounds = np.searchsorted(sums.index.get_level_values(0).to_numpy(), np.arange(len(labels) + 1))
    return {
        label: Block(codes[lo:hi], values[lo:hi])
        for label, lo, hi in zip(labels, bounds[:-1], bounds[1:], strict=True)
    }


def _ci_columns(names: list[str], point, lo, hi) -> dict[str, float]:
    row = {}
    for name, p, low, high in zip(names, point, lo, hi, strict=True):
        row |= {name: p, f"{name}_lo": low, f"{name}_hi": high}
    return row


def _group_stats(groups: dict[tuple, Block], n_boot: int, seed: int) -> pd.DataFrame:
    offsets = np.array([r.offset for r in RATIOS])
    rows = []
    for key, block in groups.items():
        point, lo, hi = bootstrap.ratio(*block.arrays(RATIOS), n_boot, seed)
        stats = _ci_columns([r.name for r in RATIOS], point + offsets, lo + offsets, hi + offsets)
        rows.append({**dict(zip(GROUP, key, strict=True)), "n_problems": len(block.problems),
                     **stats})  # fmt: skip
    return pd.DataFrame(rows)


def _speedups(groups: dict, baselines: dict, n_boot: int, seed: int) -> pd.DataFrame:
    """Paired speedups of every group over its K = 0 baseline (NaN without one)."""
    ratios = tuple(SPEEDUPS.values())
    at = [GROUP.index(c) for c in BASELINE]
    rows = []
    for key, block in groups.items():
        labels = dict(zip(GROUP, key, strict=True))
        base = baselines.get(tuple(key[i] for i in at))
        if base is None:
            rows.append(labels)
            continue
        problems = np.union1d(block.problems, base.problems)
        point, lo, hi = bootstrap.paired(
            block.on(problems).arrays(ratios), base.on(problems).arrays(ratios), "ratio",
            n_boot, seed,
        )  # fmt: skip
        rows.append({**labels, **_ci_columns(list(SPEEDUPS), point, lo, hi)})
    names = [f"{s}{end}" for s in SPEEDUPS for end in ("", "_lo", "_hi")]
    return pd.DataFrame(rows, columns=[*GROUP, *names])


def with_lossless(requests: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus ``lossless_fraction``: for a greedy (temperature 0) K > 0 run, the share
    of its problems whose output hash equals that of its K = 0 baseline, the run sharing
    :data:`SAME_OUTPUT` (one at the same concurrency preferred, then the first by run id).
    NaN for other runs and where no baseline exists."""
    runs = runs.drop(columns="lossless_fraction", errors="ignore")
    if runs.empty or requests.empty:
        return runs.assign(lossless_fraction=np.nan)
    cols = [*RUN, *SAME_OUTPUT[1:-1], "k", "concurrency", "problem_id", "output_hash"]
    req = requests[cols].dropna(subset=["output_hash"]).merge(runs[[*RUN, "max_tokens"]], on=RUN)
    base = req.loc[req["k"] == 0, [*SAME_OUTPUT, "problem_id", "run_id", "concurrency",
                                   "output_hash"]]  # fmt: skip
    spec = req[(req["k"] > 0) & (req["temperature"] == 0)]
    pairs = spec.merge(base, on=[*SAME_OUTPUT, "problem_id"], suffixes=("", "_base"))
    pairs["other_concurrency"] = pairs["concurrency"] != pairs["concurrency_base"]
    choice = (
        pairs[[*RUN, "other_concurrency", "run_id_base"]]
        .sort_values([*RUN, "other_concurrency", "run_id_base"])
        .drop_duplicates(list(RUN))
    )
    pairs = pairs.merge(choice[[*RUN, "run_id_base"]], on=[*RUN, "run_id_base"])
    same = (pairs["output_hash"] == pairs["output_hash_base"]).rename("lossless_fraction")
    fraction = same.groupby([pairs["sweep_id"], pairs["run_id"]]).mean().reset_index()
    return runs.merge(fraction, on=list(RUN), how="left")


def _run_stats(runs: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """Run-level columns per group: runs, seeds, throughput, lossless fraction."""
    runs = runs.astype({c: keys[c].dtype for c in GROUP})
    cols = {"lossless_fraction": np.nan, "output_tokens_per_s": np.nan}
    runs = runs.assign(**{c: runs.get(c, v) for c, v in cols.items()})
    return (
        runs.groupby(list(GROUP), sort=True, dropna=False)
        .agg(
            n_runs=("run_id", "size"),
            seeds=("seed", lambda s: ",".join(str(x) for x in sorted(set(s)))),
            throughput_tok_s=("output_tokens_per_s", "mean"),
            lossless_fraction=("lossless_fraction", "mean"),
        )
        .reset_index()
    )


def aggregate(
    requests: pd.DataFrame, runs: pd.DataFrame, n_boot: int = bootstrap.N_BOOT, seed: int = 0
) -> pd.DataFrame:
    """One row per :data:`GROUP`: every :data:`RATIOS` statistic and speedup with its CI,
    e2e p50/p90, run counts and run-level throughput (system tokens/s, no CI).

    Rows are sorted by sweep, difficulty, dataset, variant, concurrency and K.
    """
    if requests.empty:
        return pd.DataFrame(columns=[*GROUP, "n_problems"])
    df = with_sums(requests)
    groups = blocks(df, GROUP)
    stats = _group_stats(groups, n_boot, seed)
    speedups = _speedups(groups, blocks(df[df["k"] == 0], BASELINE), n_boot, seed)
    quantiles = (
        df.groupby(list(GROUP), sort=True, dropna=False)["e2e_s"]
        .quantile([0.5, 0.9])
        .unstack()
        .set_axis(["e2e_p50_s", "e2e_p90_s"], axis=1)
        .reset_index()
    )
    table = stats.merge(
        df.groupby(list(GROUP), dropna=False).size().rename("n_requests").reset_index(), on=GROUP
    )
    for extra in (quantiles, _run_stats(runs, stats), speedups):
        table = table.merge(extra, on=list(GROUP), how="left")
    base_tp = table[table["k"] == 0].groupby(list(BASELINE), dropna=False)["throughput_tok_s"]
    table = table.merge(base_tp.mean().rename("_base").reset_index(), on=BASELINE, how="left")
    table["speedup_throughput"] = table["throughput_tok_s"] / table.pop("_base")
    return sort_groups(table)


def sort_groups(table: pd.DataFrame, then: tuple[str, ...] = ()) -> pd.DataFrame:
    """Sweep, then difficulty (easy, medium, hard), dataset, variant, concurrency, K, ``then``."""
    order = table["difficulty"].map(DIFFICULTY_ORDER).fillna(len(DIFFICULTY_ORDER))
    keys = ["sweep_id", "_difficulty", "dataset", "variant", "concurrency", "k", *then]
    keys = [k for k in keys if k in table or k == "_difficulty"]
    return (
        table.assign(_difficulty=order)
        .sort_values(keys, kind="stable")
        .drop(columns="_difficulty")
        .reset_index(drop=True)
    )


def positions(
    requests: pd.DataFrame, n_boot: int = bootstrap.N_BOOT, seed: int = 0
) -> pd.DataFrame:
    """Conditional acceptance at each draft position i = 1..K per group, with its CI:
    P(draft i accepted | drafts 1..i-1 accepted). Groups with K = 0 have no rows."""
    spec = requests[requests["k"] > 0].reset_index(drop=True)
    if spec.empty:
        return pd.DataFrame(columns=[*GROUP, "position", "acceptance", "lo", "hi"])
    grouped = spec.groupby(list(GROUP), sort=True, dropna=False)
    labels, gid = _labels(grouped.size().index), grouped.ngroup().to_numpy()
    pos = position_counts(spec["acceptance_histogram"])
    problem = pd.factorize(spec["problem_id"], sort=True)[0]
    sums = (
        pos[["reached", "accepted"]]
        .groupby([gid[pos["row"]], problem[pos["row"]], pos["position"].to_numpy()], sort=True)
        .sum()
    )
    g, p, i = (sums.index.get_level_values(n).to_numpy() for n in range(3))
    bounds = np.searchsorted(g, np.arange(len(labels) + 1))
    rows = []
    for label, lo, hi in zip(labels, bounds[:-1], bounds[1:], strict=True):
        group = dict(zip(GROUP, label, strict=True))
        k = int(group["k"])
        problems, row = np.unique(p[lo:hi], return_inverse=True)
        counts = {}
        for col in ("reached", "accepted"):
            counts[col] = np.zeros((len(problems), k))
            counts[col][row, i[lo:hi] - 1] = sums[col].to_numpy()[lo:hi]
        point, low, high = bootstrap.ratio(counts["accepted"], counts["reached"], n_boot, seed)
        for j in range(k):
            stats = {"acceptance": point[j], "lo": low[j], "hi": high[j]}
            rows.append({**group, "position": j + 1, **stats})
    return sort_groups(pd.DataFrame(rows), then=("position",))


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (sweep, variant, dataset): the lowest concurrency, K = 0 for variants
    without a draft and the K with the highest TPOT speedup for variants with one."""
    if table.empty:
        return table
    lowest = table.groupby(["sweep_id", "variant", "dataset"])["concurrency"].transform("min")
    t = table[(table["concurrency"] == lowest) & ((table["draft"] == "none") == (table["k"] == 0))]
    score = t["speedup_tpot"].fillna(-np.inf)
    best = score.groupby([t["sweep_id"], t["variant"], t["dataset"]]).idxmax()
    return sort_groups(t.loc[best.to_numpy()])


def select(requests: pd.DataFrame, group: pd.Series | dict, keys: tuple[str, ...] = GROUP):
    """The requests of one group (``group`` holds at least ``keys``)."""
    mask = np.ones(len(requests), bool)
    for key in keys:
        mask &= (requests[key] == group[key]).to_numpy()
    return requests[mask]


def contrast(
    x: pd.DataFrame,
    y: pd.DataFrame,
    ratio: Ratio,
    how: str,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
) -> tuple[float, float, float]:
    """One statistic of two request sets compared over their problems (paired bootstrap):
    y / x (``how="ratio"``) or y - x (``how="difference"``), with its 95% CI."""
    df = with_sums(pd.concat([x.assign(_side=0), y.assign(_side=1)], ignore_index=True))
    sides = blocks(df, ("_side",))
    problems = np.union1d(*(b.problems for b in sides.values()))
    bx, by = (sides[(side,)].on(problems) for side in (0, 1))
    point, lo, hi = bootstrap.paired(bx.arrays((ratio,)), by.arrays((ratio,)), how, n_boot, seed)
    return float(point[0]), float(lo[0]), float(hi[0])
