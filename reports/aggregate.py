"""Aggregates of the request table per (variant, dataset, K, concurrency), with 95% CIs.

A group is one configuration of one sweep (:data:`GROUP`); its seeds pool. Statistics
(:data:`RATIOS`) are ratios of sums with BCa intervals over problems
(:mod:`reports.bootstrap`); speedups pair a group with its baseline (its own pairs when
interleaved, else :data:`BASELINE`) over the problems both answered; :func:`with_lossless`
compares output hashes. Definitions: docs/METRICS.md; the columns: the Aggregates contract
of docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from harness import metrics
from harness.data import grading
from reports import bootstrap, sentinel

GROUP = (
    "sweep_id", "target", "target_role", "variant", "draft", "prompt_style", "dataset",
    "difficulty", "limit", "dataset_digest",
    "temperature", "concurrency", "backend", "request_rate", "pairing", "instances", "k",
    "k_schedule", "synthetic_acceptance_length",
)  # fmt: skip
PROBLEM_SET = ("sweep_id", "dataset", "difficulty", "limit", "dataset_digest")
FAILED = ("abort", "error")  # vLLM finish reasons of requests that did not complete
QUANTILES = (0.5, 0.9, 0.99)  # latency percentiles, as vLLM's BenchmarkMetrics
# every extractor of the headline chains (harness.data.grading.CHAINS), and "none" (no answer)
EXTRACTORS = tuple(
    dict.fromkeys(
        [n for chains in grading.CHAINS.values() for n, _ in chains["headline"]] + ["none"]
    )
)
# headline extractors outside the strict chain: the fallbacks (last number, "answer is", ...)
FALLBACKS = frozenset(
    n for chains in grading.CHAINS.values() for n, _ in chains["headline"]
    if n not in {m for m, _ in chains["strict"]}
)  # fmt: skip
BASELINE = tuple(
    c for c in GROUP
    if c not in ("variant", "draft", "k", "k_schedule", "synthetic_acceptance_length", "pairing")
)  # fmt: skip
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
    # acceptance of the verify steps starting in each third of the answers
    *(Ratio(f"acceptance_{t}", f"accepted_{t}", f"drafted_{t}") for t in metrics.THIRDS),
    Ratio("truncation_rate", "truncated", "n_finish"),  # finish_reason == "length"
    Ratio("ttft_s", "ttft_s", "n_ttft"),  # seconds
    Ratio("tpot_s", "tpot_s", "n_tpot"),  # seconds per token after the first
    Ratio("itl_s", "decode_s", "n_gaps"),  # seconds per gap, over all gaps (vLLM's mean ITL)
    Ratio("e2e_s", "e2e_s", "n"),  # seconds
    Ratio("tokens_per_s", "output_tokens", "e2e_s"),  # tokens per second of a request
)
# speedup name -> the time statistic whose baseline / variant ratio it is
SPEEDUPS = {
    "speedup_tpot": Ratio("tpot", "tpot_s", "n_tpot"),
    "speedup_e2e": Ratio("e2e", "e2e_s", "n"),
    "speedup_tokens_per_s": Ratio("s_per_token", "e2e_s", "output_tokens"),
}
# the same statistics of an interleaved group's own baseline requests (``pair_*`` columns)
PAIRED = {
    "speedup_tpot": Ratio("pair_tpot", "pair_tpot_s", "pair_n_tpot"),
    "speedup_e2e": Ratio("pair_e2e", "pair_e2e_s", "pair_n"),
    "speedup_tokens_per_s": Ratio("pair_s_per_token", "pair_e2e_s", "pair_output_tokens"),
}
PAIR_COLUMNS = ("pair_ttft_s", "pair_e2e_s", "pair_tpot_s", "pair_output_tokens")
SUMMED = tuple(
    dict.fromkeys(
        c for r in (*RATIOS, *SPEEDUPS.values(), *PAIRED.values()) for c in (r.num, r.den)
    )
)
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


def windows(requests: pd.DataFrame, runs: pd.DataFrame) -> pd.Series:
    """Each request's pairing window in an interleaved run (each side's window is one
    ``generate`` call: consecutive problems, ``pair_window`` of them, else the job's
    concurrency; a record's rows are in problem order within its instance), counted per
    (run, engine instance); -1 in other runs."""
    run = list(RUN)
    given = runs.reindex(columns=[*run, "pair_window"]).drop_duplicates(run)
    given = given.astype({c: requests[c].dtype for c in run})  # no runs: float columns
    window = requests[run].merge(given, on=run, how="left")["pair_window"].to_numpy(float)
    window = np.where(np.isfinite(window) & (window > 0), window, requests["concurrency"])
    at = requests.groupby([*run, "instance"], sort=False).cumcount().to_numpy()
    paired = (requests["pairing"] == "interleaved").to_numpy()
    return pd.Series(np.where(paired, at // window.astype(int), -1), index=requests.index)


def with_sums(requests: pd.DataFrame) -> pd.DataFrame:
    """The request table plus the numeric columns :data:`SUMMED` names (nulls as 0),
    ``problem_code``, the rank of ``problem_id`` (the bootstrap's unit), and ``window``
    (:func:`windows`; -1 where the table has none)."""
    df = requests.copy()
    df["window"] = df["window"].fillna(-1).astype(int) if "window" in df else -1
    df["n"] = 1.0
    df["n_ttft"] = df["ttft_s"].notna().astype(float)
    df["n_tpot"] = df["tpot_s"].notna().astype(float)
    df["n_gaps"] = np.where(df["tpot_s"].notna(), df["output_tokens"] - 1, 0.0)
    df["decode_s"] = df["tpot_s"].astype(float).fillna(0.0) * df["n_gaps"]
    finish = df.get("finish_reason", pd.Series(None, index=df.index, dtype=object))
    df["n_finish"] = finish.notna().astype(float)
    df["truncated"] = (finish == "length").astype(float)
    for way in ("strict", "flexible"):  # NaN in runs recorded before both verdicts
        verdict = df.get(f"correct_{way}", pd.Series(np.nan, index=df.index))
        df[f"correct_{way}"] = verdict
        df[f"n_{way}"] = verdict.notna().astype(float)
    for col in PAIR_COLUMNS:  # null in runs without a pair
        df[col] = df.get(col, np.nan)
    df["pair_n"] = df["pair_e2e_s"].notna().astype(float)
    df["pair_n_tpot"] = df["pair_tpot_s"].notna().astype(float)
    for col in ("accepted", "drafted"):  # null in runs recorded before thirds existed
        thirds = df.get(f"{col}_thirds", pd.Series(None, index=df.index, dtype=object))
        known = [
            list(t) if isinstance(t, list | tuple | np.ndarray) else [np.nan] * 3 for t in thirds
        ]
        spread = np.array(known, dtype=float)
        spread = spread.reshape(-1, 3)
        for i, third in enumerate(metrics.THIRDS):
            df[f"{col}_{third}"] = spread[:, i]
    pos = position_counts(df["acceptance_histogram"])
    df["position_attempts"] = np.bincount(pos["row"], weights=pos["reached"], minlength=len(df))
    for col in SUMMED:
        df[col] = df[col].astype(float).fillna(0.0)
    df["problem_code"] = pd.factorize(df["problem_id"], sort=True)[0]
    return df


@dataclass(frozen=True)
class Block:
    """Per-problem sums of one group: sorted problem codes, a (problems, SUMMED) array,
    each problem's engine instance and its pairing window (:func:`windows`)."""

    problems: np.ndarray
    values: np.ndarray
    instance: np.ndarray
    window: np.ndarray

    @property
    def instances(self) -> tuple[int, ...] | None:
        """Each problem's instance for :func:`reports.bootstrap.weights`; None with one."""
        return tuple(self.instance.tolist()) if len(np.unique(self.instance)) > 1 else None

    def arrays(self, ratios: tuple[Ratio, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(num, den) columns of ``ratios``."""
        return self.values[:, [_COL[r.num] for r in ratios]], self.values[
            :, [_COL[r.den] for r in ratios]
        ]

    def on(self, problems: np.ndarray) -> Block:
        """The sums of ``problems`` only (a sorted subset of this block's problems)."""
        at = np.searchsorted(self.problems, problems)
        return Block(problems, self.values[at], self.instance[at], self.window[at])

    def by_window(self) -> Block:
        """The sums of each (engine instance, pairing window), in that order: the unit a
        paired comparison resamples, since the requests of one window share its batch and
        its moment on the machine. Itself where every problem is alone in its window (or
        has none)."""
        if (self.window < 0).any():
            return self
        cells = np.stack([self.instance, self.window])
        _, first, of = np.unique(cells, axis=1, return_index=True, return_inverse=True)
        if len(first) == len(self.problems):
            return self
        values = np.zeros((len(first), self.values.shape[1]))
        np.add.at(values, of.ravel(), self.values)
        return Block(self.problems[first], values, self.instance[first], self.window[first])


def compare(
    x: tuple[Block, tuple[Ratio, ...]],
    y: tuple[Block, tuple[Ratio, ...]],
    how: str,
    n_boot: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`reports.bootstrap.paired` of two blocks' statistics on the same problems,
    over x's engine instances. Where both sides share pairing windows of several requests
    (an interleaved run beside its own pairs), each end is the wider of that and the
    cluster jackknife over the windows (:meth:`Block.by_window`,
    :func:`reports.bootstrap.jackknife_t`)."""
    (bx, rx), (by, ry) = x, y
    point, lo, hi = bootstrap.paired(bx.arrays(rx), by.arrays(ry), how, n_boot, seed, bx.instances)
    shared = np.array_equal(bx.window, by.window) and np.array_equal(bx.instance, by.instance)
    units = bx.by_window() if shared else bx
    if units is not bx:
        w_lo, w_hi = bootstrap.jackknife_t(units.arrays(rx), by.by_window().arrays(ry), how)
        lo, hi = np.fmin(lo, w_lo), np.fmax(hi, w_hi)
    return point, lo, hi


def _labels(index: pd.Index) -> list[tuple]:
    return [k if isinstance(k, tuple) else (k,) for k in index]


def blocks(df: pd.DataFrame, keys: tuple[str, ...]) -> dict[tuple, Block]:
    """Group key -> :class:`Block` of :data:`SUMMED` per problem (seeds and repeats pool; a
    problem's instance is the first that answered it); ``df`` comes from :func:`with_sums`."""
    grouped = df.groupby(list(keys), sort=True, dropna=False)
    labels, gid = _labels(grouped.size().index), grouped.ngroup().to_numpy()
    by = [gid, df["problem_code"].to_numpy()]
    sums = df[list(SUMMED)].groupby(by, sort=True).sum()
    first = df[["instance", "window"]].groupby(by, sort=True).first()
    instance, window = (first[c].to_numpy(int) for c in ("instance", "window"))
    values = sums.to_numpy(float)
    codes = sums.index.get_level_values(1).to_numpy()
    bounds = np.searchsorted(sums.index.get_level_values(0).to_numpy(), np.arange(len(labels) + 1))
    return {
        label: Block(codes[lo:hi], values[lo:hi], instance[lo:hi], window[lo:hi])
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
        num, den = block.arrays(RATIOS)
        instances = block.instances
        point, lo, hi = bootstrap.ratio(num, den, n_boot, seed, instances)
        stats = _ci_columns([r.name for r in RATIOS], point + offsets, lo + offsets, hi + offsets)
        dropped = bootstrap.dropped(den, n_boot, seed, instances)[np.isfinite(point)]
        rows.append({**dict(zip(GROUP, key, strict=True)), "n_problems": len(block.problems),
                     **stats, "boot_dropped": int(dropped.max(initial=0))})  # fmt: skip
    return pd.DataFrame(rows)


def _speedups(groups: dict, baselines: dict, n_boot: int, seed: int) -> pd.DataFrame:
    """Paired speedups of every group over its baseline (NaN without one): its own pairs'
    when interleaved, else the K = 0 group's on the problems both answered; plus
    ``baseline_tpot_s``, that baseline's mean TPOT on those problems (intervals:
    :func:`compare`)."""
    ratios, pairs = tuple(SPEEDUPS.values()), tuple(PAIRED.values())
    at = [GROUP.index(c) for c in BASELINE]
    interleaved = GROUP.index("pairing")
    rows = []
    for key, block in groups.items():
        labels = dict(zip(GROUP, key, strict=True))
        if key[interleaved] == "interleaved":
            own, base = block, (block, pairs)
        else:
            other = baselines.get(tuple(key[i] for i in at))
            both = np.intersect1d(block.problems, other.problems) if other else np.zeros(0, int)
            own = block.on(both)
            base = (other.on(own.problems), ratios) if len(own.problems) else None
        if not len(own.problems):
            rows.append(labels)
            continue
        point, lo, hi = compare((own, ratios), base, "ratio", n_boot, seed)
        base_arrays = base[0].arrays(base[1])
        num, den = (a[:, 0] for a in base_arrays)
        tpot = num.sum() / den.sum() if den.sum() else np.nan
        each = _per_instance(own, base_arrays)
        rows.append({**labels, **_ci_columns(list(SPEEDUPS), point, lo, hi),
                     "baseline_tpot_s": tpot,
                     "instance_speedups": " ".join(f"{x:.4f}" for x in each) if each else None,
                     "instance_spread": _spread(each)})  # fmt: skip
    names = [f"{s}{end}" for s in SPEEDUPS for end in ("", "_lo", "_hi")]
    return pd.DataFrame(
        rows, columns=[*GROUP, *names, "baseline_tpot_s", "instance_speedups", "instance_spread"]
    )


def _spread(each: list[float]) -> float:
    """max / min - 1 of the instances' speedups; NaN with one, or with one not finite."""
    return max(each) / min(each) - 1 if len(each) > 1 and np.isfinite(each).all() else np.nan


def _per_instance(own: Block, base: tuple[np.ndarray, np.ndarray]) -> list[float]:
    """The TPOT speedup of each engine instance alone, in instance order (none with one)."""
    if own.instances is None:
        return []
    num, den = own.arrays((SPEEDUPS["speedup_tpot"],))
    return [
        float((base[0][at, 0].sum() / base[1][at, 0].sum()) / (num[at, 0].sum() / den[at, 0].sum()))
        for at in (own.instance == i for i in np.unique(own.instance))
    ]


def with_lossless(requests: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus ``lossless_fraction``: for a greedy (temperature 0) K > 0 run, the share
    of its problems whose output hash equals its baseline's: the pair's output, seconds
    apart, when interleaved; else the K = 0 run sharing :data:`SAME_OUTPUT` (one at the
    same concurrency preferred, then the first by run id). NaN for other runs and where
    no baseline exists."""
    runs = runs.drop(columns="lossless_fraction", errors="ignore")
    if runs.empty or requests.empty:
        return runs.assign(lossless_fraction=np.nan)
    pairs = requests.get("pair_output_hash", pd.Series(None, index=requests.index, dtype=object))
    paired = requests[(requests["k"] > 0) & (requests["temperature"] == 0) & pairs.notna()]
    own = (paired["output_hash"] == pairs[paired.index]).rename("lossless_fraction")
    own = own.groupby([paired["sweep_id"], paired["run_id"]]).mean().reset_index()
    cols = [*RUN, *SAME_OUTPUT[1:-1], "k", "concurrency", "problem_id", "output_hash"]
    req = requests.loc[(requests["k"] == 0) | pairs.isna(), cols].dropna(subset=["output_hash"])
    req = req.merge(runs[[*RUN, "max_tokens"]], on=RUN)
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
    return runs.merge(pd.concat([own, fraction]), on=list(RUN), how="left")


def with_goodput(
    requests: pd.DataFrame, runs: pd.DataFrame, slo: Mapping[str, float | None] | None = None
) -> pd.DataFrame:
    """``runs`` plus ``goodput``: the run's answered requests meeting every bound of its SLO
    (``harness.metrics.meets_slo``) per second of its wall time, and ``slo``, the bounds as
    a label. A run's SLO is its config's, with each bound ``slo`` names in its place; NaN
    goodput for a run whose SLO sets no bound."""
    runs = runs.drop(columns="goodput", errors="ignore")
    if runs.empty or requests.empty:
        return runs.assign(goodput=np.nan, slo="none")
    cols = [f"slo_{name}" for name in metrics.SLO_BOUNDS]
    bounds = {c: runs.get(c, pd.Series(np.nan, index=runs.index)) for c in cols}
    bounds |= {f"slo_{name}": np.nan if b is None else b for name, b in (slo or {}).items()}
    runs = runs.assign(**bounds).astype({c: float for c in cols})
    done = answered(requests)[[*RUN, "ttft_s", "tpot_s", "e2e_s"]].merge(runs[[*RUN, *cols]])
    good = metrics.meets_slo(done["ttft_s"], done["tpot_s"], done["e2e_s"],
                             {name: done[f"slo_{name}"] for name in metrics.SLO_BOUNDS})  # fmt: skip
    count = pd.Series(good, index=done.index, dtype=float).groupby(
        [done["sweep_id"], done["run_id"]]).sum().rename("good").reset_index()  # fmt: skip
    runs = runs.merge(count, on=list(RUN), how="left")
    has_slo = runs[cols].notna().any(axis=1) & (runs["wall_s"] > 0)
    label = [
        ", ".join(
            f"{n.removesuffix('_ms')} {b:g}"
            for n, b in zip(metrics.SLO_BOUNDS, r, strict=True)
            if b == b
        )
        or "none"
        for r in runs[cols].to_numpy()
    ]
    goodput = (runs["good"].fillna(0.0) / runs["wall_s"]).where(has_slo)
    return runs.assign(goodput=goodput, slo=label).drop(columns="good")


def pair_side(requests: pd.DataFrame) -> pd.DataFrame:
    """The baseline side of interleaved requests as requests of their own: the ``pair_*``
    timings and lengths in place of the request's, at K = 0 without spec counts."""
    side = requests.assign(
        **{c.removeprefix("pair_"): requests[c] for c in PAIR_COLUMNS}, k=0,
        num_spec_steps=np.nan, num_draft_tokens=np.nan, num_accepted_tokens=np.nan,
    )  # fmt: skip
    hist = requests["acceptance_histogram"]
    return side.assign(acceptance_histogram=pd.Series(None, index=side.index, dtype=hist.dtype))


def _run_stats(runs: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """Run-level columns per group: runs, seeds, throughput, lossless fraction."""
    runs = runs.astype({c: keys[c].dtype for c in GROUP})
    cols = {"lossless_fraction": np.nan, "output_tokens_per_s": np.nan,
            "request_throughput": np.nan, "goodput": np.nan, "slo": "none"}  # fmt: skip
    runs = runs.assign(**{c: runs.get(c, v) for c, v in cols.items()})
    return (
        runs.groupby(list(GROUP), sort=True, dropna=False)
        .agg(
            n_runs=("run_id", "size"),
            seeds=("seed", lambda s: ",".join(str(x) for x in sorted(set(s)))),
            throughput_tok_s=("output_tokens_per_s", "mean"),
            request_throughput=("request_throughput", "mean"),
            goodput=("goodput", "mean"),
            slo=("slo", lambda s: " / ".join(sorted(set(s)))),
            lossless_fraction=("lossless_fraction", "mean"),
        )
        .reset_index()
    )


def answered(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that completed (finish reason not in :data:`FAILED`)."""
    if "finish_reason" not in requests:
        return requests
    return requests[~requests["finish_reason"].isin(FAILED)].reset_index(drop=True)


def _losses(requests: pd.DataFrame) -> pd.DataFrame:
    """Per group: ``num_failed`` requests and ``num_missing`` problems, summed over runs (a
    run misses the problems of its :data:`PROBLEM_SET` it has no row for)."""
    failed = requests.get("finish_reason", pd.Series(index=requests.index)).isin(FAILED)
    universe = requests.groupby(list(PROBLEM_SET), dropna=False)["problem_id"].nunique()
    per_run = (
        requests.assign(num_failed=failed.astype(int))
        .groupby([*GROUP, "run_id"], dropna=False)
        .agg(_answered=("problem_id", "nunique"), num_failed=("num_failed", "sum"))
        .reset_index()
        .merge(universe.rename("_universe").reset_index(), on=list(PROBLEM_SET), how="left")
    )
    per_run["num_missing"] = per_run.pop("_universe") - per_run.pop("_answered")
    return per_run.groupby(list(GROUP), dropna=False)[["num_missing", "num_failed"]].sum()


def _quantiles(ok: pd.DataFrame) -> pd.DataFrame:
    """Per group: p50/p90/p99 of TTFT, TPOT and e2e over requests, and of ITL over gaps:
    the streamed chunks' gaps where a request recorded them (the server backend), else its
    output tokens - 1 gaps taken equal to its TPOT; every percentile interpolates linearly
    (numpy's default, as vLLM's benchmarks)."""
    grouped = ok.groupby(list(GROUP), sort=True, dropna=False)
    parts = [
        grouped[f"{m}_s"].quantile(list(QUANTILES)).unstack().set_axis(
            [f"{m}_p{round(100 * q)}_s" for q in QUANTILES], axis=1)
        for m in ("ttft", "tpot", "e2e")
    ]  # fmt: skip
    itl = {}
    for key, g in ok.dropna(subset=["tpot_s"]).groupby(list(GROUP), sort=True, dropna=False):
        streamed = g["itl_s"].notna() if "itl_s" in g else pd.Series(False, index=g.index)
        spread = g[~streamed]
        gaps = np.concatenate([
            np.repeat(spread["tpot_s"].to_numpy(), spread["output_tokens"].to_numpy().astype(int) - 1),
            *(np.asarray(x, float) for x in g.loc[streamed, "itl_s"]),
        ])  # fmt: skip
        itl[key] = np.percentile(gaps, [100 * q for q in QUANTILES])
    names = [f"itl_p{round(100 * q)}_s" for q in QUANTILES]
    index = pd.MultiIndex.from_tuples(list(itl), names=list(GROUP)) if itl else None
    parts.append(pd.DataFrame(list(itl.values()), index=index, columns=names))
    return pd.concat(parts, axis=1)


def _short_proposals(ok: pd.DataFrame) -> pd.DataFrame:
    """Per group: ``n_short_proposals``, K > 0 requests with fewer drafts than K per verify
    step (prompt lookup can propose fewer when fewer tokens follow its match); position
    statistics count every step as K drafts, so they undercount acceptance past a short
    proposal there."""
    fixed = ok["k_schedule"] == "none"  # a K schedule drafts fewer than K at some batch sizes
    short = fixed & (ok["k"] > 0) & (ok["num_draft_tokens"] < ok["k"] * ok["num_spec_steps"])
    frame = ok[list(GROUP)].assign(n_short_proposals=short.astype(int))
    return frame.groupby(list(GROUP), sort=True, dropna=False).sum()


def _answers(ok: pd.DataFrame) -> pd.DataFrame:
    """Per group: the share of answers each extractor found (``extractor_share_<name>``)
    and ``n_truncated_fallback_correct``, truncated answers graded correct by a fallback."""
    ext = ok["extractor"]
    shares = {f"extractor_share_{n}": (ext == n).astype(float).where(ext.notna())
              for n in EXTRACTORS}  # fmt: skip
    lucky = (ok["finish_reason"] == "length") & (ok["correct"] == 1) & ext.isin(FALLBACKS)
    frame = ok[list(GROUP)].assign(**shares, n_truncated_fallback_correct=lucky.astype(int))
    how = {c: "mean" for c in shares} | {"n_truncated_fallback_correct": "sum"}
    return frame.groupby(list(GROUP), sort=True, dropna=False).agg(how)


def _repeats(df: pd.DataFrame) -> pd.DataFrame:
    """Per group, across its seeds (repeats): the median, min and max of each speedup
    (each seed against its own pairs when interleaved, else against the baseline's same
    seed on the problems both answered) and the mean and std of acceptance."""
    accept = RATIOS[[r.name for r in RATIOS].index("acceptance_rate")]
    ratios = tuple(SPEEDUPS.values())
    base = blocks(df[df["k"] == 0], (*BASELINE, "seed"))
    at, interleaved = [GROUP.index(c) for c in BASELINE], GROUP.index("pairing")
    rows = []
    for key, block in blocks(df, (*GROUP, "seed")).items():
        speedups = np.full(len(ratios), np.nan)
        if key[interleaved] == "interleaved":
            problems, (bn, bd) = block.problems, block.arrays(tuple(PAIRED.values()))
        else:
            other = base.get((*(key[i] for i in at), key[-1]))
            problems = np.intersect1d(block.problems, other.problems) if other else []
            bn, bd = other.on(problems).arrays(ratios) if len(problems) else (None, None)
        if len(problems):
            vn, vd = block.on(problems).arrays(ratios)
            with np.errstate(divide="ignore", invalid="ignore"):
                speedups = (bn.sum(0) / bd.sum(0)) / (vn.sum(0) / vd.sum(0))
        num, den = block.arrays((accept,))
        rate = num.sum() / den.sum() if den.sum() else np.nan
        rows.append((*key[:-1], *speedups, rate))
    per_seed = pd.DataFrame(rows, columns=[*GROUP, *SPEEDUPS, "acceptance_rate"])
    how = {"n_repeats": ("acceptance_rate", "size")}
    for name in SPEEDUPS:
        for stat in ("median", "min", "max"):
            how[f"{name}_repeat_{stat}"] = (name, stat)
    how |= {"acceptance_rate_repeat_mean": ("acceptance_rate", "mean"),
            "acceptance_rate_repeat_std": ("acceptance_rate", "std")}  # fmt: skip
    return per_seed.groupby(list(GROUP), sort=True, dropna=False).agg(**how)


def hardware_id(runs: pd.DataFrame) -> pd.Series:
    """Per run: CPU model / GPU names, what a speedup must not cross."""
    cpu = runs.get("hardware_cpu", pd.Series("?", index=runs.index)).fillna("?").astype(str)
    gpu = runs.get("hardware_gpu", pd.Series(None, index=runs.index, dtype=object))
    return cpu + " / " + gpu.fillna("no GPU").astype(str)


def versions_id(runs: pd.DataFrame) -> pd.Series:
    """Per run: ``name version`` of every recorded version, comma-separated."""
    cols = sorted(c for c in runs.columns if c.startswith("versions_"))
    text = pd.Series("", index=runs.index)
    for c in cols:
        text += c.removeprefix("versions_") + " " + runs[c].fillna("?").astype(str) + ", "
    return text.str.removesuffix(", ")


def _same_hardware(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """NaN speedups (with ``speedup_note``) where a sequential group's baseline ran on
    other hardware; a note where its versions differ."""
    runs = runs.astype({c: table[c].dtype for c in BASELINE}).assign(
        _hw=hardware_id(runs), _ver=versions_id(runs))  # fmt: skip
    joined = dict.fromkeys(("_hw", "_ver"), lambda s: "; ".join(sorted(set(s))))
    base = runs[runs["k"] == 0].groupby(list(BASELINE), dropna=False).agg(joined)
    mine = runs.groupby(list(GROUP), dropna=False).agg(joined)
    both = table[list(GROUP)].merge(mine.reset_index(), on=list(GROUP), how="left").merge(
        base.reset_index(), on=list(BASELINE), how="left", suffixes=("", "_base"))  # fmt: skip
    alone = (table["pairing"] != "interleaved").to_numpy()  # a pair shares its run's machine
    other_hw = alone & (both["_hw_base"].notna() & (both["_hw"] != both["_hw_base"])).to_numpy()
    other_ver = alone & (both["_ver_base"].notna() & (both["_ver"] != both["_ver_base"])).to_numpy()
    note = np.where(other_hw, "no speedup: baseline on " + both["_hw_base"].astype(str)
                    + ", this on " + both["_hw"].astype(str), "")  # fmt: skip
    note = np.where(~other_hw & other_ver, "baseline ran other versions: "
                    + both["_ver_base"].astype(str), note)  # fmt: skip
    speedups = [c for c in table.columns if c.startswith("speedup_") and "predicted" not in c]
    table.loc[other_hw, speedups] = np.nan
    return table.assign(speedup_note=note)


def aggregate(
    requests: pd.DataFrame, runs: pd.DataFrame, n_boot: int = bootstrap.N_BOOT, seed: int = 0
) -> pd.DataFrame:
    """One row per :data:`GROUP`: every :data:`RATIOS` statistic and speedup with its CI,
    latency percentiles, answer extraction, losses, run counts, spread across repeats and
    run-level throughput (system tokens/s, no CI).

    Rows are sorted by sweep, difficulty, dataset, variant, concurrency and K.
    """
    if requests.empty:
        return pd.DataFrame(columns=[*GROUP, "n_problems"])
    if "window" not in requests:
        requests = requests.assign(window=windows(requests, runs))
    ok = answered(requests)
    df = with_sums(ok)
    groups = blocks(df, GROUP)
    stats = _group_stats(groups, n_boot, seed)
    speedups = _speedups(groups, blocks(df[df["k"] == 0], BASELINE), n_boot, seed)
    table = stats.merge(
        df.groupby(list(GROUP), dropna=False).size().rename("n_requests").reset_index(), on=GROUP
    )
    extras = (_quantiles(ok), _answers(ok), _short_proposals(ok), _losses(requests), _repeats(df))
    cast = runs.astype({c: stats[c].dtype for c in GROUP})
    for extra in (*(e.reset_index() for e in extras), _run_stats(runs, stats), sentinel.by_group(cast, GROUP),
                  speedups):  # fmt: skip
        table = table.merge(extra, on=list(GROUP), how="left")
    base_tp = table[table["k"] == 0].groupby(list(BASELINE), dropna=False)["throughput_tok_s"]
    table = table.merge(base_tp.mean().rename("_base").reset_index(), on=BASELINE, how="left")
    table["speedup_throughput"] = table["throughput_tok_s"] / table.pop("_base")
    return sort_groups(_same_hardware(table, runs))


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
    spec = answered(requests[requests["k"] > 0])
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
    both = pd.concat([x.assign(_side=0), y.assign(_side=1)], ignore_index=True)
    sides = blocks(with_sums(answered(both)), ("_side",))
    if len(sides) < 2:
        return np.nan, np.nan, np.nan
    problems = np.intersect1d(*(b.problems for b in sides.values()))
    if not len(problems):
        return np.nan, np.nan, np.nan
    bx, by = (sides[(side,)].on(problems) for side in (0, 1))
    point, lo, hi = compare((bx, (ratio,)), (by, (ratio,)), how, n_boot, seed)
    return float(point[0]), float(lo[0]), float(hi[0])
