"""The cost model against measurement: predicted TPOT speedups, and best K per draft
configuration.

:func:`with_predictions` adds to each K > 0 group of the aggregates its predicted speedups
(cost model, simple model, pre-flight, speculation off), finding their inputs in the
calibration and pre-flight files; :func:`verify_steps` prices a K schedule's verify steps;
:func:`fit` gives per draft configuration a pooled over K, the measured c and the best K
predicted and measured. One row's assembly is :func:`reports.theory.predict_from_costs`.
The columns: docs/METRICS.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from reports import aggregate, bootstrap, load, theory

CONFIG = tuple(c for c in aggregate.GROUP if c != "k")
ALPHA = next(r for r in aggregate.RATIOS if r.name == "alpha")
COLUMNS = (
    *CONFIG, "ks", "alpha", "alpha_lo", "alpha_hi", "alpha_vllm", "c", "best_k_predicted",
    "speedup_predicted", "best_k_preflight", "best_k_measured", "speedup_measured",
    "speedup_measured_lo", "speedup_measured_hi", "speedup_at_predicted", "best_k_agrees",
)  # fmt: skip
PREDICTED = (
    "t_target_s", "t_step_s", "c", "speedup_tpot_predicted", "speedup_tpot_predicted_simple",
    "acceptance_preflight", "mean_acceptance_length_preflight", "speedup_tpot_preflight",
    "speedup_off_predicted", "tpot_predicted_s", "speedup_tpot_predicted_lo",
    "speedup_tpot_predicted_hi",
)  # fmt: skip
ENGINE = ("sweep_id", "target", "draft", "k", "k_schedule")  # a calibrated engine spec
WITHIN = 0.10  # the model check: |measured / predicted - 1| <= WITHIN


def calibration(runs: pd.DataFrame) -> pd.DataFrame:
    """The calibration files of the runs' sweeps: sweep_id, target, draft, k, k_schedule,
    concurrency, per_unit_s (s per token at K = 0, per verify step at K > 0),
    undrafted_step_s, baseline_per_unit_s (``harness.calibration.record.table``). A K = 0 row with a
    draft is its speculator with speculation off."""
    from harness.calibration import record

    cols = ["sweep_id", "target", "draft", "k", "k_schedule", "concurrency", "per_unit_s",
            "undrafted_step_s", "baseline_per_unit_s"]  # fmt: skip
    if runs.empty:
        return pd.DataFrame(columns=cols)
    sweeps = runs.groupby("sweep_id")["path"].first()
    rows = [{"sweep_id": sweep, **row} for sweep, path in sweeps.items()
            for row in record.table(Path(path).parent)]  # fmt: skip
    cal = pd.DataFrame(rows, columns=cols).astype(
        {"per_unit_s": float, "undrafted_step_s": float, "baseline_per_unit_s": float}
    )
    return cal.assign(
        draft=cal["draft"].fillna(load.NO_DRAFT), k_schedule=cal["k_schedule"].fillna(load.FIXED_K)
    )


def verify_steps(cal: pd.DataFrame) -> pd.DataFrame:
    """The K > 0 rows of :func:`calibration`. A K schedule drafts only at the batch sizes
    where its K > 0, so a level it runs at K = 0 (no verify step timed) prices the verify
    steps its runs take as their batch drains at its nearest lower level's."""
    spec = cal[cal["k"] > 0].sort_values("concurrency")
    engine = ["sweep_id", "target", "draft", "k", "k_schedule"]
    lower = spec.groupby(engine)["per_unit_s"].ffill()
    off = (spec["k_schedule"] != load.FIXED_K) & spec["per_unit_s"].isna()
    off &= spec["undrafted_step_s"].notna()  # timed per token (timing.without_drafts)
    return spec.assign(per_unit_s=spec["per_unit_s"].mask(off, lower).astype(float))


def cost_at(levels: pd.Series, batch: float) -> float:
    """A calibrated cost (``levels``, indexed by concurrency) at batch size ``batch``:
    linear in log cost over log batch size between the calibrated concurrencies, clamped
    to the calibrated range (the nearest end's cost outside it); NaN without a calibrated
    level or a batch size."""
    levels = levels.dropna()
    if levels.empty or not np.isfinite(batch):
        return np.nan
    levels = levels.groupby(level=0).mean().sort_index()
    x, y = np.log(levels.index.to_numpy(float)), np.log(levels.to_numpy(float))
    return float(np.exp(np.interp(np.log(batch), x, y)))


def open_loop(table: pd.DataFrame) -> pd.Series:
    """The K > 0 rows at an open-loop request rate with a measured batch size
    (``reports.serving.with_batch_sizes``): the rows priced at the batch sizes they ran."""
    if "batch_size" not in table:
        return pd.Series(False, index=table.index)
    rate = table["request_rate"] != load.CLOSED_LOOP
    return (table["k"] > 0) & rate & table["batch_size"].notna()


def _at_load(table: pd.DataFrame, cal: pd.DataFrame) -> pd.DataFrame:
    """The step costs of the :func:`open_loop` rows at the batch sizes they ran (NaN on
    other rows), each by :func:`cost_at`: ``t_step`` (a verify step of the row's engine)
    and ``t_undrafted`` (its step without drafts, else the plain target's token) at
    ``batch_size``; ``t_target`` (an interleaved calibration's plain target timed in its
    window, else the plain target calibrated alone) at ``baseline_batch_size``, else at
    ``batch_size``."""
    costs = pd.DataFrame(np.nan, index=table.index, columns=["t_step", "t_undrafted", "t_target"])
    spec = verify_steps(cal).set_index("concurrency")
    plain = cal[(cal["k"] == 0) & (cal["draft"] == load.NO_DRAFT)].set_index("concurrency")
    for i, row in table[open_loop(table)].iterrows():
        own = spec[np.logical_and.reduce([spec[c] == row[c] for c in ENGINE])]
        alone = plain.loc[(plain["sweep_id"] == row["sweep_id"])
                          & (plain["target"] == row["target"]), "per_unit_s"]  # fmt: skip
        b = row["batch_size"]
        b0 = row["baseline_batch_size"] if np.isfinite(row["baseline_batch_size"]) else b
        window = own["baseline_per_unit_s"] if row["pairing"] == "interleaved" else own[[]]
        undrafted = cost_at(own["undrafted_step_s"], b)
        target = cost_at(window, b0) if not window.empty else np.nan
        costs.loc[i] = [
            cost_at(own["per_unit_s"], b),
            undrafted if np.isfinite(undrafted) else cost_at(alone, b),
            target if np.isfinite(target) else cost_at(alone, b0),
        ]
    return costs


def preflights(runs: pd.DataFrame) -> pd.DataFrame:
    """Pre-flight counts of the K = 0 runs, pooled per baseline, draft and K."""
    from harness.measure import preflight

    keys = [*aggregate.BASELINE, "draft", "k"]
    sums = ["num_drafts", "num_draft_tokens", "num_accepted_tokens", "_steps_per_token", "_n"]
    rows = []
    for _, run in runs[runs["k"] == 0].iterrows() if not runs.empty else []:
        for draft, result in preflight.read(Path(run["path"])).items():
            for k, counts in result["ks"].items():
                base = {c: run[c] for c in aggregate.BASELINE}
                ratios = preflight.steps_per_token(result, int(k))  # for the mean TPOT
                extra = {"_steps_per_token": sum(ratios), "_n": len(ratios)}
                rows.append({**base, "draft": draft, "k": int(k), **counts, **extra})
    if not rows:
        return pd.DataFrame(columns=[*keys, "acceptance_preflight",
                                     "mean_acceptance_length_preflight", "_steps_preflight"])  # fmt: skip
    pooled = pd.DataFrame(rows).groupby(keys, dropna=False)[sums].sum().reset_index()
    pooled["acceptance_preflight"] = pooled["num_accepted_tokens"] / pooled["num_draft_tokens"]
    pooled["mean_acceptance_length_preflight"] = (
        1 + pooled["num_accepted_tokens"] / pooled["num_drafts"]
    )
    # verify steps per token for the mean TPOT from the replayed steps (files without
    # ``agree``: 1 / the pooled E)
    steps = pooled["_steps_per_token"] / pooled["_n"].where(pooled["_n"] > 0)
    pooled["_steps_preflight"] = steps.fillna(1 / pooled["mean_acceptance_length_preflight"])
    return pooled.drop(columns=sums)


def _decode(requests: pd.DataFrame) -> pd.DataFrame:
    """Per group: the decode tokens (output tokens - 1) and the steps without drafts of the
    answered requests with a TPOT, as lists."""
    done = aggregate.answered(requests).dropna(subset=["tpot_s"])
    tokens = done["output_tokens"].astype(int) - 1
    drafted = done["num_spec_steps"].fillna(0) + done["num_accepted_tokens"].fillna(0)
    frame = pd.DataFrame({"_tokens": tokens, "_undrafted": (tokens - drafted).clip(lower=0)})
    return frame.groupby([done[c] for c in aggregate.GROUP], dropna=False).agg(list)


def with_predictions(
    table: pd.DataFrame, positions: pd.DataFrame, runs: pd.DataFrame, requests: pd.DataFrame
) -> pd.DataFrame:
    """``table`` (aggregates) plus the :data:`PREDICTED` columns (NaN on K = 0 rows).

    Each row is priced at its ``concurrency``; an :func:`open_loop` row at the batch sizes
    it ran (:func:`_at_load`; c and ``speedup_off_predicted`` stay at its concurrency), with
    ``speedup_tpot_predicted_lo`` / ``_hi`` from every position's acceptance at its 95%
    CI's low / high end (NaN on other rows)."""
    table = table.drop(columns=list(PREDICTED), errors="ignore")
    if table.empty:
        return table.assign(**{c: pd.Series(dtype=float) for c in PREDICTED})
    group = list(aggregate.GROUP)
    ends = {"acceptance": "_rates", "lo": "_rates_lo", "hi": "_rates_hi"}
    rates = positions.sort_values("position").groupby(group, dropna=False)[list(ends)]
    steps = (
        rates.agg(list)
        .rename(columns=ends)
        .reset_index()
        .merge(_decode(requests).reset_index(), on=group, how="left")
    )
    per_token = [
        theory.decode_steps(r, t, u) if isinstance(t, list) else (np.nan, np.nan)
        for r, t, u in zip(steps["_rates"], steps["_tokens"], steps["_undrafted"], strict=True)
    ]
    steps["_each"] = steps["_undrafted"]  # per request, for the interval's ends
    steps[["_steps", "_undrafted"]] = per_token if per_token else np.empty((0, 2))
    steps = steps[[*group, "_steps", "_undrafted", "_rates_lo", "_rates_hi", "_tokens", "_each"]]
    cal = calibration(runs)
    at = ["sweep_id", "target", "concurrency"]
    zero = cal["k"] == 0
    plain = cal[zero & (cal["draft"] == load.NO_DRAFT)].groupby(at)["per_unit_s"].mean()
    off = cal[zero & (cal["draft"] != load.NO_DRAFT)].groupby([*at, "draft"])["per_unit_s"]
    engine = [*at, "draft", "k", "k_schedule"]
    spec_cal = verify_steps(cal).groupby(engine)
    out = (
        table.merge(steps, on=group, how="left")
        .merge(spec_cal["per_unit_s"].mean().rename("t_step_s").reset_index(),
               on=engine, how="left")
        .merge(spec_cal["baseline_per_unit_s"].mean().rename("_t_window").reset_index(),
               on=engine, how="left")
        .merge(spec_cal["undrafted_step_s"].mean().rename("_t_undrafted").reset_index(),
               on=engine, how="left")
        .merge(off.mean().rename("_t_off").reset_index(), on=[*at, "draft"], how="left")
        .merge(plain.rename("_t_plain").reset_index(), on=at, how="left")
        .merge(plain.rename("_t_draft").reset_index().rename(columns={"target": "draft"}),
               on=["sweep_id", "draft", "concurrency"], how="left")
        .merge(preflights(runs), on=[*aggregate.BASELINE, "draft", "k"], how="left")
    )  # fmt: skip
    spec = out["k"] > 0
    window = out.pop("_t_window").where(out["pairing"] == "interleaved")
    out["t_target_s"] = window.fillna(out["baseline_tpot_s"]).where(spec)
    t_plain = out.pop("_t_plain")
    steps, undrafted = out.pop("_steps"), out.pop("_undrafted")
    t_undrafted = out.pop("_t_undrafted").fillna(t_plain)
    at_load = _at_load(out, cal)
    out["t_step_s"] = at_load["t_step"].fillna(out["t_step_s"])
    out["t_target_s"] = at_load["t_target"].fillna(out["t_target_s"])
    t_undrafted = at_load["t_undrafted"].fillna(t_undrafted)
    costs = (out["t_target_s"], out["t_step_s"], out.pop("_t_draft"), t_plain, out["k"])
    model = theory.predict_from_costs(steps, *costs, undrafted, t_undrafted)
    out["tpot_predicted_s"] = out["t_target_s"] / model.speedup
    listed = [out[c].map(lambda x: isinstance(x, list)) for c in ("_tokens", "_rates_lo")]
    at = open_loop(out) & listed[0] & listed[1]
    tokens, each = out.pop("_tokens"), out.pop("_each")
    for end in ("lo", "hi"):
        rates = out.pop(f"_rates_{end}")
        end_steps = pd.Series(np.nan, index=out.index)
        end_steps[at] = [
            theory.decode_steps(rates[i], tokens[i], each[i])[0] for i in out.index[at]
        ]
        out[f"speedup_tpot_predicted_{end}"] = theory.speedup_from_costs(
            end_steps, out["t_target_s"], out["t_step_s"], undrafted, t_undrafted
        )
    out["c"] = model.c
    out["speedup_off_predicted"] = t_plain / out.pop("_t_off")
    out["speedup_tpot_predicted"] = model.speedup
    out["speedup_tpot_predicted_simple"] = model.speedup_simple
    # E from the replayed steps of the K = 0 outputs, as bench/drafts.py predicts
    out["speedup_tpot_preflight"] = theory.predict_from_costs(
        out.pop("_steps_preflight"), *costs
    ).speedup
    out.loc[~spec, list(PREDICTED)] = np.nan
    return out


def model_check(table: pd.DataFrame, fits: pd.DataFrame) -> str:
    """One line: how many K > 0 rows the cost model predicts within :data:`WITHIN`, and how
    often the predicted best K agrees with the measured one."""
    rows = table.dropna(subset=["speedup_tpot", "speedup_tpot_predicted"])
    if rows.empty:
        return "cost model: no K > 0 row has a calibration (run python -m harness.sweep.calibrate)"
    miss = (rows["speedup_tpot"] / rows["speedup_tpot_predicted"] - 1).abs()
    simple = (rows["speedup_tpot"] / rows["speedup_tpot_predicted_simple"] - 1).abs()
    agree = fits["best_k_agrees"].dropna()
    return (
        f"cost model: {int((miss <= WITHIN).sum())} of {len(rows)} K > 0 rows within "
        f"{WITHIN:.0%} of the measured TPOT speedup (median |measured / predicted - 1| "
        f"{miss.median():.3f}, max {miss.max():.3f}); simple model E/(Kc+1): "
        f"{int((simple <= WITHIN).sum())} of {int(simple.notna().sum())}; best K agrees in "
        f"{int(agree.sum())} of {len(agree)} configurations"
    )


def _alpha_vllm(runs: pd.DataFrame, drafted: pd.Series) -> float:
    """Pooled a from the summaries' per-position counters, over the runs whose counters
    cover every request: as many draft tokens as ``drafted`` (by sweep_id and run_id)
    says their requests drafted (an instance's counters are lost to an engine started
    after the job's own, docs/METRICS.md); NaN when no run's do."""
    if "spec_accepted_per_pos" not in runs:
        return float("nan")
    key = pd.MultiIndex.from_frame(runs[["sweep_id", "run_id"]])
    whole = runs["spec_num_draft_tokens"].to_numpy() == drafted.reindex(key).to_numpy()
    spec = runs[whole].dropna(subset=["spec_accepted_per_pos", "spec_num_drafts"])
    return theory.alpha_mle(spec["spec_accepted_per_pos"], spec["spec_num_drafts"])


def fit(
    table: pd.DataFrame,
    requests: pd.DataFrame,
    runs: pd.DataFrame,
    n_boot: int = bootstrap.N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per draft configuration with a speculative (K > 0) group in ``table``
    (:func:`with_predictions` applied)."""
    spec = table[(table["k"] > 0) & (table["draft"] != "none")]
    if spec.empty:
        return pd.DataFrame(columns=COLUMNS)
    spec_requests = aggregate.answered(requests[requests["k"] > 0])  # as every statistic
    by_config = aggregate.blocks(aggregate.with_sums(spec_requests), CONFIG)
    drafted = requests.groupby(["sweep_id", "run_id"])["num_draft_tokens"].sum()
    rows = []
    for key, groups in spec.groupby(list(CONFIG), sort=True, dropna=False):
        labels = dict(zip(CONFIG, key, strict=True))
        point, lo, hi = bootstrap.ratio(*by_config[key].arrays((ALPHA,)), n_boot, seed)
        measured = _best(groups, "speedup_tpot")
        predicted = _best(groups, "speedup_tpot_predicted")
        at_predicted = groups.loc[groups["k"] == predicted[0], "speedup_tpot"]
        at_predicted = float(at_predicted.iloc[0]) if len(at_predicted) else 1.0
        if predicted[1] is None:
            at_predicted = np.nan
        lo_best = measured[2] if measured[0] else 1.0
        rows.append(
            {
                **labels,
                "ks": ",".join(str(k) for k in sorted(groups["k"])),
                "alpha": float(point[0]),
                "alpha_lo": float(lo[0]),
                "alpha_hi": float(hi[0]),
                "alpha_vllm": _alpha_vllm(aggregate.select(runs, labels, CONFIG), drafted),
                "c": groups["c"].mean(),
                "best_k_predicted": predicted[0] if predicted[1] is not None else -1,
                "speedup_predicted": predicted[1],
                "best_k_preflight": _best(groups, "speedup_tpot_preflight")[0],
                "best_k_measured": measured[0],
                "speedup_measured": measured[1],
                "speedup_measured_lo": measured[2],
                "speedup_measured_hi": measured[3],
                "speedup_at_predicted": at_predicted,
                "best_k_agrees": np.nan
                if predicted[1] is None
                else (predicted[0] == measured[0] or at_predicted >= lo_best),
            }
        )
    return aggregate.sort_groups(pd.DataFrame(rows, columns=COLUMNS))


def _best(groups: pd.DataFrame, column: str) -> tuple[int, float | None, float, float]:
    """(K, speedup, lo, hi) of the highest ``column`` among the groups, K = 0 (1x) when none
    beats plain decoding; speedup None when the column has no value (CI NaN when absent)."""
    rows = groups.dropna(subset=[column])
    if rows.empty:
        return -1, None, np.nan, np.nan
    top = rows.loc[rows[column].idxmax()]
    if top[column] <= 1.0:
        return 0, 1.0, 1.0, 1.0
    ci = [float(top.get(f"{column}_{end}", np.nan)) for end in ("lo", "hi")]
    return int(top["k"]), float(top[column]), ci[0], ci[1]
