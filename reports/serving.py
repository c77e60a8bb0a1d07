"""Speculation under load: the batch sizes the server ran, the server backend's groups by
request rate, the load at which speculation stops paying (measured and predicted), a K
schedule by batch size to deploy, and the runs whose streamed outputs reached the client
in one chunk (where the client's TPOT measures nothing).

A group's speedup at a request rate pairs it with the K = 0 group at the same rate
(``reports.aggregate``); the crossover of a speculative configuration reads those
speedups along its rates, a closed-loop one along its concurrencies. The K
schedule reads closed-loop groups at several concurrencies: the cost model's predicted
speedup per K at each (``reports.fit``), the measured one beside it, and the schedule's
own run when it has one.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from harness import schedule, speculators
from harness.backends import streamed
from reports.aggregate import BASELINE, FAILED, GROUP, windows
from reports.load import CLOSED_LOOP, FIXED_K, natural

CONFIGURATION = ["sweep_id", "variant", "dataset", "k", "concurrency"]
BATCH = ("batch_size", "baseline_batch_size")  # the columns :func:`with_batch_sizes` adds
ONE_CHUNK = 0.10  # a run's share of outputs in one chunk past which :func:`one_chunk` names it


def in_decode(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per decode interval [start, end) of one time origin: the mean number of intervals
    open over it, its own included (the overlaps' sum over its length); NaN for an
    empty or unknown interval."""
    overlap = np.minimum(end[:, None], end[None, :]) - np.maximum(start[:, None], start[None, :])
    total = np.nansum(np.clip(overlap, 0.0, None), axis=1)
    length = end - start
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, total / length, np.nan)


def batch_sizes(requests: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per request of a streamed run (``requests``' index): ``batch_size``, the mean number
    of its run's requests in decode over its own decode interval, its own included: the
    engine's decode time (TPOT times the tokens after the first) ending at sent + e2e
    (sent + TTFT to sent + e2e where TPOT is unknown); and ``pair_batch_size``, its
    baseline pair's among the pairs of its window (NaN without ``pair_sent_s``: runs
    recorded before it; NaN offline).

    Assumes every request in flight is running on the server: the client sends at most
    ``concurrency`` at once and the config keeps ``concurrency <= engine.max_num_seqs``,
    so no request waits in the server's queue. Requests in prefill are not counted (a
    request's decode starts at its first token)."""
    out = pd.DataFrame(np.nan, index=requests.index, columns=["batch_size", "pair_batch_size"])
    if requests.empty or "sent_s" not in requests:
        return out
    served = requests[requests["backend"].map(streamed) & requests["sent_s"].notna()]
    if served.empty:
        return out
    origin = windows(served, runs).clip(lower=0)  # a time origin per window
    keys = [served["sweep_id"], served["run_id"], served["instance"], origin]
    pair_sent = served.get("pair_sent_s", pd.Series(np.nan, index=served.index))
    for rows in served.groupby(keys, sort=False).indices.values():
        index = served.index[rows]
        for column, prefix, sent in (("batch_size", "", served["sent_s"]),
                                     ("pair_batch_size", "pair_", pair_sent)):  # fmt: skip
            sent = sent.iloc[rows].to_numpy(float)
            if not np.isfinite(sent).any():
                continue
            ttft, e2e, tpot, tokens = (
                served[f"{prefix}{t}"].iloc[rows].to_numpy(float)
                for t in ("ttft_s", "e2e_s", "tpot_s", "output_tokens")
            )
            decode = np.where(np.isfinite(tpot), tpot * (tokens - 1), e2e - ttft)
            out.loc[index, column] = in_decode(sent + e2e - decode, sent + e2e)
    return out


def _weighted(values: pd.Series, weights: pd.Series, by: list[pd.Series]) -> pd.Series:
    """Per group of ``by``: the mean of ``values`` weighted by ``weights`` (finite ones)."""
    keep = values.notna() & (weights > 0)
    frame = pd.DataFrame({"w": weights.where(keep, 0.0), "wv": (values * weights).where(keep, 0.0)})
    sums = frame.groupby(by, dropna=False).sum()
    return sums["wv"] / sums["w"].where(sums["w"] > 0)


def with_batch_sizes(
    table: pd.DataFrame, requests: pd.DataFrame, runs: pd.DataFrame
) -> pd.DataFrame:
    """``table`` (aggregates) plus :data:`BATCH`: per streamed group the batch size its
    answered requests ran at (:func:`batch_sizes`), a mean weighted by decode tokens
    (output tokens - 1: the batch a decode token's step ran at, as TPOT prices tokens),
    and its baseline's: an interleaved group's own pairs' (its own where the records lack
    the pairs' send times), else the K = 0 groups' at the same load. NaN offline."""
    table = table.drop(columns=list(BATCH), errors="ignore")
    if table.empty or requests.empty:
        return table.assign(**{c: pd.Series(dtype=float) for c in BATCH})
    ok = requests[~requests.get("finish_reason", pd.Series(index=requests.index)).isin(FAILED)]
    each = batch_sizes(requests, runs).loc[ok.index]  # failed requests were in flight too
    by = [ok[c] for c in GROUP]
    own = _weighted(each["batch_size"], ok["output_tokens"] - 1, by).rename("batch_size")
    pair_tokens = ok.get("pair_output_tokens", pd.Series(np.nan, index=ok.index)) - 1
    pair = _weighted(each["pair_batch_size"], pair_tokens.astype(float), by).rename("_pair")
    out = table.merge(pd.concat([own, pair], axis=1).reset_index(), on=list(GROUP), how="left")
    k0 = out[out["k"] == 0].groupby(list(BASELINE), dropna=False)["batch_size"].mean()
    out = out.merge(k0.rename("_k0").reset_index(), on=list(BASELINE), how="left")
    paired = out["pairing"] == "interleaved"
    base = out.pop("_pair").where(paired, out.pop("_k0"))
    out["baseline_batch_size"] = base.fillna(out["batch_size"].where(paired))
    return out


def by_rate(table: pd.DataFrame) -> pd.DataFrame:
    """The server backend's groups, by configuration and request rate."""
    if table.empty:
        return table
    rows = table[table["backend"].map(streamed)]
    return rows.sort_values([*CONFIGURATION[:3], "k", "request_rate"])


def crossing(rate: np.ndarray, speedup: np.ndarray) -> float:
    """The rate at which ``speedup`` (along increasing ``rate``) falls to 1: linear between
    the last rate at or above 1 and the first below it; the lowest rate when the first
    is already below 1, NaN when none is (unknown rates' speedups left out)."""
    known = np.isfinite(speedup)
    rate, speedup = rate[known], speedup[known]
    below = np.flatnonzero(speedup < 1)
    if not len(below):
        return np.nan
    j = below[0]
    if j == 0:
        return float(rate[0])
    r0, r1, s0, s1 = rate[j - 1], rate[j], speedup[j - 1], speedup[j]
    return float(r0 + (s0 - 1) / (s0 - s1) * (r1 - r0))


PREDICTED_CROSSOVER = ("predicted_crossover", "predicted_crossover_lo", "predicted_crossover_hi")


def _along(g: pd.DataFrame, axis: str) -> dict[str, object]:
    """One configuration's crossover columns along ``axis`` (request_rate or concurrency)."""
    g = g.sort_values(axis)
    load = g[axis].to_numpy(float)

    def lowest(mask: pd.Series) -> float:
        return float(load[mask.to_numpy()].min()) if mask.any() else np.nan

    def predicted(end: str) -> float:
        column = f"speedup_tpot_predicted{end}"
        return crossing(load, g.get(column, pd.Series(np.nan, index=g.index)).to_numpy(float))

    helps = g["speedup_tpot_lo"] > 1
    return {
        "loads": ", ".join(f"{x:g}" for x in load),
        "helps_up_to": float(load[helps.to_numpy()].max()) if helps.any() else np.nan,
        "first_below_1": lowest(g["speedup_tpot"] < 1),
        "hurts_from": lowest(g["speedup_tpot_hi"] < 1),
        **dict(zip(PREDICTED_CROSSOVER, (predicted(e) for e in ("", "_lo", "_hi")), strict=True)),
    }


RATE, IN_FLIGHT = "req/s", "in flight"  # a crossover's axis


def crossovers(table: pd.DataFrame) -> pd.DataFrame:
    """Per speculative server configuration run at two or more loads: open loop along its
    request rates (``axis`` req/s), closed loop along its concurrencies (``axis`` in
    flight; across the report's sweeps when no concurrency is run twice, its
    ``sweep_id`` then naming them all). Along the loads run: the highest whose TPOT
    speedup's 95% CI lies above 1 (``helps_up_to``), the lowest whose speedup is below 1
    (``first_below_1``: the crossover) and the lowest whose CI lies below 1
    (``hurts_from``); NaN where none qualifies. Beside them the cost model's
    (``reports.fit``, each load priced at the batch sizes it ran): the load where its
    predicted speedup falls to 1 (:func:`crossing`), and the same along the predicted
    speedups with every position's acceptance at its CI's low and high end (its interval;
    a NaN high end: the upper curve stays above 1 over the loads run)."""
    columns = [*CONFIGURATION, "k_schedule", "axis", "loads", "helps_up_to", "first_below_1",
               "hurts_from", *PREDICTED_CROSSOVER]  # fmt: skip
    if table.empty:
        return pd.DataFrame(columns=columns)
    rows = table[table["backend"].map(streamed) & (table["k"] > 0)]
    rows = rows[rows["speedup_tpot"].notna()]
    out = []
    open_loop = rows[rows["request_rate"] != CLOSED_LOOP]
    configuration = [*CONFIGURATION, "k_schedule"]  # a K schedule is a configuration of its own
    for key, g in open_loop.groupby(configuration, sort=True):
        if g["request_rate"].nunique() > 1:
            out.append({**dict(zip(configuration, key, strict=True)), "axis": RATE,
                        **_along(g, "request_rate")})  # fmt: skip
    closed = rows[rows["request_rate"] == CLOSED_LOOP]
    along = ["variant", "dataset", "k", "k_schedule"]
    for sweeps, key, g in by_concurrency(closed, along):
        out.append({"sweep_id": sweeps, **dict(zip(along, key, strict=True)),
                    "concurrency": np.nan, "axis": IN_FLIGHT,
                    **_along(g, "concurrency")})  # fmt: skip
    return pd.DataFrame(out, columns=columns)


def by_concurrency(
    rows: pd.DataFrame, key: list[str]
) -> list[tuple[str, tuple[Any, ...], pd.DataFrame]]:
    """Closed-loop ``rows`` by ``key`` and run at two or more concurrencies, each group
    across the report's sweeps: one group per choice of sweep at each concurrency run in
    two or more of them (a sweep made again as a later pass), so no group holds a load
    twice: (its sweeps, comma-joined, each with its loads when a load is split; its key;
    its rows)."""
    out = []
    for k, rows_k in rows.groupby(key, sort=True):
        if rows_k["concurrency"].nunique() < 2:
            continue
        held = rows_k.groupby("concurrency")["sweep_id"].unique()
        split = any(len(sweeps) > 1 for sweeps in held)
        at = pd.MultiIndex.from_arrays([rows_k["concurrency"], rows_k["sweep_id"]])
        for choice in itertools.product(*(sorted(s, key=natural) for s in held)):
            picked = list(zip(held.index, choice, strict=True))
            loads: dict[str, list[str]] = {}
            for c, sweep in picked:
                loads.setdefault(sweep, []).append(f"{c:g}")
            g = rows_k[at.isin(picked)]
            label = ", ".join(
                f"{s} ({', '.join(loads[s])})" if split else s for s in sorted(loads, key=natural)
            )
            out.append((label, k, g))
    return out


def _off(at: pd.DataFrame) -> float | None:
    """A concurrency's speedup at K = 0 of a schedule: the speculator's calibrated speed with
    speculation off over the target's (``speedup_off_predicted``, both calibrated on the
    same fixed requests); None when uncalibrated."""
    off = at.get("speedup_off_predicted", pd.Series(dtype=float)).dropna()
    return float(off.iloc[0]) if len(off) else None


def _best_k(at: pd.DataFrame, column: str) -> int:
    """The K of the highest ``column`` among a concurrency's K > 0 rows; 0 when none
    exceeds K = 0's speedup (:func:`_off`, else 1: the target alone) or none is known."""
    known = at.dropna(subset=[column])
    off = _off(at)
    if known.empty or known[column].max() <= (1.0 if off is None else off):
        return 0
    return int(known.loc[known[column].idxmax(), "k"])


SCHEDULED = ["sweep_id", "backend", "variant", "dataset"]


def _off_text(off: dict[int, float | None]) -> str:
    """K = 0's speedup per concurrency; "target alone" where it was not calibrated."""
    if all(v is None for v in off.values()):
        return "target alone"
    return ", ".join(f"{c}: {'target alone' if v is None else f'{v:.2f}x'}" for c, v in off.items())


def unschedulable(req: pd.DataFrame) -> set[str]:
    """The variants of ``req`` whose speculator drafts only at the K it was started with
    (``follows_k_schedule``: vLLM's suffix proposer)."""
    methods = req.dropna(subset=["method"]).drop_duplicates("variant")
    return {
        v for v, m in zip(methods["variant"], methods["method"], strict=True)
        if not speculators.get(m).follows_k_schedule
    }  # fmt: skip


def k_schedules(table: pd.DataFrame, req: pd.DataFrame) -> pd.DataFrame:
    """Per speculator configuration run closed loop at fixed Ks and two or more
    concurrencies (:func:`by_concurrency`; ``sweep_id`` names its sweeps) whose speculator
    follows a schedule (not :func:`unschedulable` in ``req``): the K per batch
    size the cost model predicts fastest (K = 0 where no K beats speculation off,
    :func:`_off`), as vLLM's ``num_speculative_tokens_per_batch_size``, the best K
    measured at each concurrency,
    K = 0's speedup at each (``off``; "target alone" where uncalibrated) and the overrides
    that run the schedule."""
    columns = [*SCHEDULED, "concurrencies", "predicted", "measured", "off", "schedule",
               "overrides"]  # fmt: skip
    if table.empty:
        return pd.DataFrame(columns=columns)
    fixed = table[(table["request_rate"] == CLOSED_LOOP) & (table["k_schedule"] == FIXED_K)]
    fixed = fixed[(fixed["k"] > 0) & ~fixed["variant"].isin(unschedulable(req))]
    out = []
    for sweeps, key, g in by_concurrency(fixed, SCHEDULED[1:]):
        levels = sorted(int(c) for c in g["concurrency"].unique())
        by_level = {int(c): at for c, at in g.groupby("concurrency")}
        predicted = {c: _best_k(by_level[c], "speedup_tpot_predicted") for c in levels}
        measured = {c: _best_k(by_level[c], "speedup_tpot") for c in levels}
        ranges = schedule.from_levels(levels, predicted)
        top = int(g["k"].max())
        shown = str(ranges).replace(" ", "")
        out.append({
            "sweep_id": sweeps,
            **dict(zip(SCHEDULED[1:], key, strict=True)),
            "concurrencies": ", ".join(map(str, levels)),
            "predicted": ", ".join(f"{c}: K={k}" for c, k in predicted.items()),
            "measured": ", ".join(f"{c}: K={k}" for c, k in measured.items()),
            "off": _off_text({c: _off(by_level[c]) for c in levels}),
            "schedule": shown,
            "overrides": f"variant={key[1]} dataset={key[2]} spec.k={top} spec.k_schedule={shown}",
        })  # fmt: skip
    return pd.DataFrame(out, columns=columns)


def schedule_checks(table: pd.DataFrame) -> pd.DataFrame:
    """Each K schedule's measured run beside the best fixed K measured at the same
    concurrency (closed loop) on the same variant, dataset and problems, in any of the
    report's sweeps (each speedup is over its own K = 0 pairs): the schedule's TPOT speedup
    and the fixed K's, with CIs, and the fixed K's sweep."""
    speedup = ["speedup_tpot", "speedup_tpot_lo", "speedup_tpot_hi"]
    own = [*SCHEDULED, "concurrency", "k_schedule", *speedup]
    columns = [*own, "best_fixed_k", "fixed_sweep_id", *(f"fixed_{s}" for s in speedup)]
    if table.empty:
        return pd.DataFrame(columns=columns)
    closed = table[(table["request_rate"] == CLOSED_LOOP) & (table["k"] > 0)]
    runs = closed[closed["k_schedule"] != FIXED_K]
    fixed = closed[closed["k_schedule"] == FIXED_K].dropna(subset=["speedup_tpot"])
    out = []
    for _, row in runs.iterrows():
        same = fixed
        for c in (*SCHEDULED[1:], "limit", "concurrency"):
            same = same[same[c] == row[c]]
        best = same.loc[same["speedup_tpot"].idxmax()] if not same.empty else None
        out.append({
            **{c: row[c] for c in own},
            "best_fixed_k": np.nan if best is None else int(best["k"]),
            "fixed_sweep_id": None if best is None else best["sweep_id"],
            **{f"fixed_{s}": np.nan if best is None else best[s] for s in speedup},
        })  # fmt: skip
    return pd.DataFrame(out, columns=columns).sort_values([*SCHEDULED, "concurrency"])


def one_chunk(requests: pd.DataFrame) -> pd.DataFrame:
    """Per server run, the share of its outputs (more than one token) whose first streamed
    chunk was also their last (TTFT = e2e: the client saw a burst), on its own side and on its
    paired plain side; the runs past :data:`ONE_CHUNK` on either side."""
    served = requests["backend"].map(streamed).astype(bool)  # an empty arrow column maps to str
    req = requests[served & (requests["output_tokens"] > 1)]
    if req.empty:
        return pd.DataFrame(columns=[*CONFIGURATION, "run_id", "one_chunk", "pair_one_chunk"])
    paired = req["pair_e2e_s"].notna()
    plain = (req["pair_ttft_s"] >= req["pair_e2e_s"]).astype(float).where(paired)
    whole = req.assign(one_chunk=(req["ttft_s"] >= req["e2e_s"]).astype(float),
                       pair_one_chunk=plain)  # fmt: skip
    keys = [*CONFIGURATION, "run_id"]
    shares = whole.groupby(keys, dropna=False)[["one_chunk", "pair_one_chunk"]].mean()
    past = (shares["one_chunk"] > ONE_CHUNK) | (shares["pair_one_chunk"] > ONE_CHUNK)
    return shares[past].reset_index()
