"""Markdown writers: REPORT.md for stored runs, SIMULATION.md for the simulator.

Pure formatting of precomputed tables: no statistics are computed here, and nothing
time-dependent is written, so the same runs give the same file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness import metrics
from harness.backends import streamed
from reports import aggregate, hypotheses, load, sentinel, serving, theory, whatif
from reports.plotting import Shown

if TYPE_CHECKING:
    from reports.simulate import Simulation
    from reports.tables import ReportTables

Column = tuple[str, Callable[[pd.Series], str]]  # header, row -> cell


def num(x: object, digits: int = 3, scale: float = 1.0) -> str:
    """A number with ``digits`` decimals; a dash for missing values."""
    if x is None or (isinstance(x, float) and not np.isfinite(x)) or pd.isna(x):
        return "–"
    return f"{float(x) * scale:.{digits}f}"


def ci(row: pd.Series, stat: str, digits: int = 3, scale: float = 1.0) -> str:
    """``value [lo, hi]`` from the ``stat``, ``stat_lo``, ``stat_hi`` columns."""
    if pd.isna(row.get(stat)):
        return "–"
    lo, hi = (num(row.get(f"{stat}_{e}"), digits, scale) for e in ("lo", "hi"))
    return f"{num(row[stat], digits, scale)} [{lo}, {hi}]"


def table(df: pd.DataFrame, columns: Sequence[Column]) -> str:
    """A GitHub markdown table with one row per row of ``df``."""
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(str(f(row)).replace("|", "\\|") for _, f in columns) + " |")
    return "\n".join(lines)


def _col(name: str, digits: int = 3) -> Callable[[pd.Series], str]:
    return lambda r: num(r[name], digits) if isinstance(r[name], float) else str(r[name])


def _pairing(r: pd.Series) -> str:
    """The pairing, with ``xN`` when the problems split over N engine instances (pairs)."""
    n = r.get("instances", 1)
    return r["pairing"] if pd.isna(n) or n <= 1 else f"{r['pairing']} x{n:.0f}"


# lm-eval's two GSM8K extractions beside the headline accuracy (harness.data.grading.CHAINS)
STRICT_FLEXIBLE: Column = (
    "strict / flexible",
    lambda r: f"{num(r.get('accuracy_strict'))} / {num(r.get('accuracy_flexible'))}",
)
HEADLINE: list[Column] = [
    ("dataset", lambda r: f"{r['dataset']} ({r['difficulty']})"),
    ("variant", _col("series")),
    ("K", _col("k")),
    ("pairing", _pairing),
    ("accuracy", lambda r: ci(r, "accuracy")),
    STRICT_FLEXIBLE,
    ("output tokens", lambda r: ci(r, "output_tokens", 1)),
    ("accept. rate", lambda r: ci(r, "acceptance_rate")),
    ("TPOT ms", lambda r: ci(r, "tpot_s", 1, 1000)),
    ("e2e p50 / p90 s", lambda r: f"{num(r['e2e_p50_s'], 2)} / {num(r['e2e_p90_s'], 2)}"),
    ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("e2e speedup", lambda r: ci(r, "speedup_e2e", 2)),
]


def _rate(r: pd.Series, name: str = "request_rate") -> str:
    """A request rate (req/s): ``closed`` for closed loop (0), – for none (NaN)."""
    rate = r[name]
    return "–" if pd.isna(rate) else "closed" if rate == 0 else f"{rate:g}"


def _scheduled(r: pd.Series, text: str) -> str:
    """``text`` with the row's K schedule when it had one."""
    return text if r["k_schedule"] == "none" else f"{text}, K by batch {r['k_schedule']}"


def _load(r: pd.Series) -> str:
    """How a group's requests were served: offline, or a server at a rate (closed loop
    otherwise), with its K schedule when it had one."""
    return _scheduled(r, f"{r['backend']} {_rate(r)}" if streamed(r["backend"]) else r["backend"])


ALL_GROUPS: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("load", _load),
    ("K", _col("k")),
    ("pairing", _pairing),
    ("runs (seeds)", lambda r: f"{r['n_runs']:.0f} ({r['seeds']})"),
    ("problems", _col("n_problems")),
    ("accuracy", lambda r: ci(r, "accuracy")),
    STRICT_FLEXIBLE,
    ("tokens", lambda r: num(r["output_tokens"], 1)),
    ("accept. rate", lambda r: ci(r, "acceptance_rate")),
    ("mean accept. len", lambda r: ci(r, "mean_acceptance_length", 2)),
    ("TTFT ms", lambda r: num(r["ttft_s"], 1, 1000)),
    ("TPOT ms", lambda r: num(r["tpot_s"], 2, 1000)),
    ("e2e p50/p90 s", lambda r: f"{num(r['e2e_p50_s'], 2)}/{num(r['e2e_p90_s'], 2)}"),
    ("tok/s (req.)", lambda r: ci(r, "tokens_per_s", 1)),
    ("tok/s (run)", lambda r: num(r["throughput_tok_s"], 1)),
    ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("e2e speedup", lambda r: ci(r, "speedup_e2e", 2)),
    ("tok/s speedup", lambda r: ci(r, "speedup_tokens_per_s", 2)),
    ("instance spread", lambda r: num(r.get("instance_spread"), 3)),
    ("lossless", lambda r: num(r.get("lossless_fraction"))),
    ("truncated", lambda r: num(r.get("truncation_rate"))),
    ("cut off, right by fallback", lambda r: num(r.get("n_truncated_fallback_correct"), 0)),
    (
        "missing / failed",
        lambda r: f"{num(r.get('num_missing'), 0)} / {num(r.get('num_failed'), 0)}",
    ),
]
FITS: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("K run", _col("ks")),
    ("a [CI]", lambda r: ci(r, "alpha")),
    ("a (vLLM counters)", lambda r: num(r["alpha_vllm"])),
    ("c measured", lambda r: num(r["c"])),
    ("best K predicted", lambda r: "–" if r["best_k_predicted"] < 0 else f"{r['best_k_predicted']} ({num(r['speedup_predicted'], 2)}x)"),
    ("best K pre-flight", lambda r: "–" if r["best_k_preflight"] < 0 else str(r["best_k_preflight"])),
    ("best K measured", lambda r: f"{r['best_k_measured']} ({ci(r, 'speedup_measured', 2)}x)"),
    ("measured at predicted K", lambda r: num(r["speedup_at_predicted"], 2)),
    ("agrees", lambda r: "–" if pd.isna(r["best_k_agrees"]) else "yes" * bool(r["best_k_agrees"]) or "no"),
]  # fmt: skip


ALONG: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("load", _load),
    ("K", _col("k")),
    *((f"accept. {t} third", lambda r, t=t: ci(r, f"acceptance_{t}")) for t in metrics.THIRDS),
    ("late - early", lambda r: num(r["acceptance_late"] - r["acceptance_early"])),
]


def _along(table_: pd.DataFrame) -> list[str]:
    """Acceptance by where the verify step starts in its answer (``harness.metrics``)."""
    rows = table_[(table_["k"] > 0) & table_["acceptance_early"].notna()]
    if rows.empty:
        return []
    return ["## Acceptance along the answer", "",
            "Acceptance of the verify steps that start in the first, middle and last third of "
            "each answer (ratios of sums over the group's requests, 95% CIs); prompt lookup "
            "rows are missing when steps without drafts hide where the others start.", "",
            table(rows, ALONG), ""]  # fmt: skip


SERVING: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("K", _col("k")),
    ("rate req/s", _rate),
    ("max in flight", _col("concurrency")),
    ("achieved req/s", lambda r: num(r["request_throughput"], 2)),
    ("output tok/s", lambda r: num(r["throughput_tok_s"], 1)),
    ("TTFT p50 / p99 ms", lambda r: f"{num(r['ttft_p50_s'], 0, 1000)} / {num(r['ttft_p99_s'], 0, 1000)}"),
    ("batch own / plain", lambda r: f"{num(r['batch_size'], 1)} / {num(r['baseline_batch_size'], 1)}"),
    ("TPOT ms", lambda r: ci(r, "tpot_s", 1, 1000)),
    ("predicted TPOT ms", lambda r: num(r["tpot_predicted_s"], 1, 1000)),
    ("ITL p50 / p99 ms", lambda r: f"{num(r['itl_p50_s'], 1, 1000)} / {num(r['itl_p99_s'], 1, 1000)}"),
    ("goodput req/s", lambda r: num(r["goodput"], 2)),
    ("SLO ms", _col("slo")),
    ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("predicted TPOT speedup", lambda r: _predicted(r, "speedup_tpot_predicted", num)),
    ("e2e speedup", lambda r: ci(r, "speedup_e2e", 2)),
]  # fmt: skip
CROSSOVER: list[Column] = [
    ("sweeps", _col("sweep_id")),
    ("dataset", _col("dataset")),
    ("variant", lambda r: _scheduled(r, r["variant"])),
    ("K", _col("k")),
    ("load", _col("axis")),
    ("loads run", _col("loads")),
    ("helps up to (CI > 1)", lambda r: _rate(r, "helps_up_to")),
    ("crossover (first < 1)", lambda r: _rate(r, "first_below_1")),
    ("hurts from (CI < 1)", lambda r: _rate(r, "hurts_from")),
    ("predicted crossover", lambda r: _predicted(r, "predicted_crossover", _rate_or_more)),
]

ONE_CHUNK: list[Column] = [
    ("sweep", _col("sweep_id")),
    ("run", lambda r: f"`{r['run_id']}`"),
    ("outputs in one chunk (own side)", lambda r: num(r["one_chunk"], 2)),
    ("outputs in one chunk (plain side)", lambda r: num(r["pair_one_chunk"], 2)),
]


def _rate_or_more(x: object, digits: int = 2) -> str:
    """A crossover load's end; a NaN end lies past the loads run."""
    return f"{x:.{digits}f}" if pd.notna(x) else "past the loads run"


def _predicted(r: pd.Series, name: str, show: Callable[..., str]) -> str:
    """A prediction and its interval (``<name>_lo`` / ``_hi``, acceptance at its CI's
    ends); the point alone where it has none."""
    if pd.isna(r.get(name)):
        return "–"
    lo, hi = r.get(f"{name}_lo"), r.get(f"{name}_hi")
    ends = f" ({show(lo, 2)} to {show(hi, 2)})" if pd.notna(lo) else ""
    return f"{show(r[name], 2)}{ends}"


SCHEDULES: list[Column] = [
    ("sweeps", _col("sweep_id")),
    ("dataset", _col("dataset")),
    ("variant", _col("variant")),
    ("backend", _col("backend")),
    ("concurrencies", _col("concurrencies")),
    ("best K predicted", _col("predicted")),
    ("best K measured", _col("measured")),
    ("K = 0 (speculation off)", _col("off")),
    ("schedule (num_speculative_tokens_per_batch_size)", lambda r: f"`{r['schedule']}`"),
]
SCHEDULE_CHECKS: list[Column] = [
    ("sweep", _col("sweep_id")),
    ("dataset", _col("dataset")),
    ("variant", _col("variant")),
    ("conc.", _col("concurrency")),
    ("schedule", _col("k_schedule")),
    ("schedule's TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("best fixed K", lambda r: num(r["best_fixed_k"], 0)),
    ("its sweep", _col("fixed_sweep_id")),
    ("its TPOT speedup", lambda r: ci(r, "fixed_speedup_tpot", 2)),
]


def _schedules(schedules: pd.DataFrame, checks: pd.DataFrame) -> list[str]:
    """The K schedule to deploy per configuration, and each schedule's own run."""
    if schedules.empty:
        return []
    out = ["## A K schedule to deploy", "",
           "From the closed-loop runs at several concurrencies: at each, the K the cost model "
           "predicts fastest and the best K measured, where K = 0 counts at the speculator's "
           "calibrated speed with speculation off (its draft or head still loaded; the "
           "target alone where `python -m harness.sweep.calibrate` has not measured it); "
           "each level's K holds from halfway (geometrically) after the level below to halfway "
           "before the level above, in the form vLLM takes as "
           "`speculative_config.num_speculative_tokens_per_batch_size` (`spec.k_schedule`). "
           "A speculator whose vLLM proposer drafts only at the K it was started with (suffix "
           "decoding) gets none.", "",
           table(schedules, SCHEDULES), ""]  # fmt: skip
    if not checks.empty:
        out += ["Each schedule's own run beside the best fixed K measured at the same "
                "concurrency on the same problems, in any sweep of the report (TPOT speedups, "
                "each over its own K = 0 pairs, 95% CIs):", "",
                table(checks, SCHEDULE_CHECKS), ""]  # fmt: skip
    return out


def _serving(rows: pd.DataFrame, cross: pd.DataFrame, whole: pd.DataFrame) -> list[str]:
    """The server backend's groups by request rate, where speculation stops paying, and the
    runs whose outputs reached the client in one chunk."""
    rows = rows[rows["request_rate"] != 0] if not rows.empty else rows
    if rows.empty and cross.empty and whole.empty:
        return []
    out = ["## Serving under load", ""]
    if not rows.empty:
        out += ["Jobs against vLLM's OpenAI-compatible server, streamed: open-loop arrivals at the "
               "rate shown (`closed`: a new request as one finishes), at most `max in flight` "
               "at once. ITL percentiles are over the gaps between streamed chunks (a chunk "
               "carries one verify step's tokens); goodput counts the requests per second that "
               "met every bound of the SLO shown (the job's `slo`, or the report's `slo.*` "
               "overrides; – without one); each speedup pairs the row "
               "with K = 0 at the same rate (95% CIs). `batch own / plain`: the mean number of "
               "requests in decode beside each decode token (the row's, then its baseline's), "
               "read from the send times; the cost model prices each row's steps at those batch "
               "sizes (predicted TPOT and speedup; in brackets the speedup with every draft "
               "position's acceptance at its 95% CI's low and high end).", "",
               table(rows, SERVING), ""]  # fmt: skip
    if not cross.empty:
        out += ["Where speculation stops paying (TPOT speedup along the open-loop request "
                "rates, req/s, or the closed-loop concurrencies, requests in flight, across "
                "the sweeps that ran them; – where no load qualifies); the predicted "
                "crossover is the load where the predicted speedup falls to 1, linear "
                "between the loads run (the lowest load when it is below 1 there), with the "
                "same along the acceptance CI's ends in brackets:", "",
                table(cross, CROSSOVER), ""]  # fmt: skip
    if not whole.empty:
        out += [f"**Outputs in one chunk.** In these runs more than {serving.ONE_CHUNK:.0%} of "
                "a side's outputs reached the client as a single streamed chunk (TTFT = e2e, "
                "more than one token): the client saw them in a burst, so their TTFT and e2e "
                "carry the delivery's delay. A run timed on the engine's clock keeps their "
                "TPOT; on the client's clock (a run made before the servers reported their "
                "per-request timings, METRICS.md) it reads 0, and the run's TPOT speedup "
                "measures nothing.", "",
                table(whole, ONE_CHUNK), ""]  # fmt: skip
    return out


WHATIF: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("K", _col("k")),
    ("set accept. len", lambda r: num(r[whatif.SYNTHETIC], 2)),
    ("measured accept. len", lambda r: num(r["mean_acceptance_length"], 2)),
    ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("predicted", lambda r: num(r["speedup_tpot_predicted"], 2)),
    ("measured / predicted", lambda r: num(r["measured_over_predicted"], 3)),
    ("T_step ms", lambda r: num(r["t_step_s"], 2, 1000)),
    ("c", lambda r: num(r["c"], 3)),
]
NEEDED: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("K", _col("k")),
    ("accept. len for 2x", lambda r: num(r["needed"], 2)),
    ("best speedup measured", lambda r: num(r["best"], 2)),
]


def _whatif(surface: pd.DataFrame) -> list[str]:
    """The what-if runs: measured speedup at set acceptance beside the cost model."""
    if surface.empty:
        return []
    hits, points = whatif.hit_rate(surface)
    return ["## What-if: speedup against acceptance", "",
            "Runs with `spec.synthetic_acceptance_length`: vLLM accepted each draft at "
            "random so the mean acceptance length is the one set, with the speculator's real "
            "step costs, and every answer ran to max_tokens. Their outputs are not the "
            "target's, so they have no accuracy, no losslessness and no verdict, and no other "
            "table holds them. Predicted: the cost model from the measured acceptance and the "
            f"calibrated step costs; {hits} of {points} points are within "
            f"{whatif.WITHIN:.0%} of it.", "",
            table(surface, WHATIF), "",
            "The mean acceptance length each K needs for a 2x TPOT speedup, linear between "
            "the measured points (– where no point reached 2x):", "",
            table(whatif.needed(surface), NEEDED), ""]  # fmt: skip


def _ratio(measured: str, predicted: str) -> Callable[[pd.Series], str]:
    return lambda r: num(r[measured] / r[predicted], 3) if pd.notna(r[predicted]) else "–"


PREDICTIONS: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("load", _load),
    ("K", _col("k")),
    ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 2)),
    ("predicted", lambda r: num(r["speedup_tpot_predicted"], 2)),
    ("measured / predicted", _ratio("speedup_tpot", "speedup_tpot_predicted")),
    ("simple E/(Kc+1)", lambda r: num(r["speedup_tpot_predicted_simple"], 2)),
    ("measured / simple", _ratio("speedup_tpot", "speedup_tpot_predicted_simple")),
    ("T_step ms", lambda r: num(r["t_step_s"], 2, 1000)),
    ("accept. rate", lambda r: num(r["acceptance_rate"])),
    ("pre-flight accept.", lambda r: num(r["acceptance_preflight"])),
    ("pre-flight speedup", lambda r: num(r["speedup_tpot_preflight"], 2)),
]
# Spec-Bench's two numbers (reports.specbench) beside ours
SPEC_BENCH: list[Column] = [
    ("dataset", _col("dataset")),
    ("variant", _col("series")),
    ("conc.", _col("concurrency")),
    ("K", _col("k")),
    ("mean accept. len (ours)", lambda r: num(r["mean_acceptance_length"], 2)),
    ("MAT (Spec-Bench)", lambda r: num(r["spec_bench_mat"], 2)),
    ("TPOT speedup (ours)", lambda r: num(r["speedup_tpot"], 2)),
    ("speedup (Spec-Bench)", lambda r: num(r["spec_bench_speedup"], 2)),
]
SPEC_BENCH_NOTE = (
    "Spec-Bench's MAT counts tokens per target forward pass including the prefill step "
    "(so K = 0 scores 1.00, and short answers score lower than our 1 + accepted / verify "
    "steps), and its speedup is the mean of per-request tokens/s (e2e, prefill included) "
    "over the baseline's mean, where ours divides mean TPOTs (decode only)."
)
METRICS = Path(__file__).resolve().parent.parent / "docs" / "METRICS.md"  # the definitions


def _definitions(out_dir: Path, n_boot: int, seed: int) -> str:
    """A link to the definitions (relative to the report), and this report's intervals."""
    link = Path(os.path.relpath(METRICS, out_dir.resolve())).as_posix()
    return (
        f"Every column and statistic is defined in [docs/METRICS.md]({link}) of draftbench. "
        f"Intervals here: 95% BCa bootstrap over problems ({n_boot} replicates, "
        f"seed {seed}); an interleaved speedup with several requests a window: at each end "
        "the wider of that and the cluster jackknife over its windows."
    )


def _figure(i: int, s: Shown) -> list[str]:
    """Figure ``i``: its image and caption, or one line saying why it was not drawn."""
    title = s.name.replace("_", " ")
    if s.path is None:
        return [f"**{i}. {title}**: skipped, {s.note}.", ""]
    return [f"**{i}. {title}**", "", f"![{s.caption}](figures/{s.path.name})", "",
            f"*{s.caption}*", ""]  # fmt: skip


def _figures(shown: Sequence[Shown], first: int = 1) -> list[str]:
    """The figures, numbered from ``first``."""
    return ["## Figures", ""] + [line for i, s in enumerate(shown, first) for line in _figure(i, s)]


def _hypotheses(verdicts: tuple[hypotheses.Verdict, ...]) -> list[str]:
    out = ["## Seed hypotheses", ""]
    need = {1: "a base target and a fine-tuned target at K = 0 on the same dataset",
            2: "a draft variant at K > 0 and its target at K = 0",
            3: "a CoT target and a CoD target at K = 0"}  # fmt: skip
    for h, text in hypotheses.HYPOTHESES.items():
        mine = [v for v in verdicts if v.hypothesis == h]
        out.append(f"### H{h}. {text}")
        out.append("")
        if not mine:
            out += [f"Not testable with these runs: needs {need[h]}.", ""]
            continue
        tally = pd.Series([v.verdict for v in mine]).value_counts()
        counts = ", ".join(f"{n} {v}" for v, n in tally.items())
        judged = tally.drop(hypotheses.UNTESTABLE, errors="ignore")  # what the data can carry
        overall = (
            hypotheses.UNTESTABLE if judged.empty else judged.index[0] if len(judged) == 1
            else "mixed"
        )  # fmt: skip
        out += [f"**Verdict: {overall}** ({counts} of {len(mine)} comparisons).", ""]
        rows = pd.DataFrame([v.to_row() for v in mine])
        out += [table(rows, [("sweep", _col("sweep_id")), ("dataset", _col("dataset")),
                             ("comparison", _col("comparison")), ("evidence", _col("evidence")),
                             ("verdict", _col("verdict"))]), ""]  # fmt: skip
    out += ["How the verdicts are reached:", "", hypotheses.RULES, ""]
    return out


def _environment(runs: pd.DataFrame) -> list[str]:
    out = ["## Hardware and software", ""]
    for prefix, what in (("hardware_", "hardware"), ("versions_", "versions")):
        cols = sorted(c for c in runs.columns if c.startswith(prefix))
        if not cols:
            continue
        combos = runs[cols].astype(str).drop_duplicates()
        renamed = combos.rename(columns={c: c.removeprefix(prefix) for c in cols})
        out += [f"{what} ({len(combos)} distinct):", "",
                table(renamed, [(c, _col(c)) for c in renamed.columns]), ""]  # fmt: skip
    if "engine_launches" in runs:
        out.append(
            f"Runs: {len(runs)}; wall time {num(runs['wall_s'].sum(), 1)} s; engine start-up "
            f"{num(runs['engine_start_s'].sum(), 1)} s in total; reused engines "
            f"{int(runs['engine_reused'].fillna(False).astype(bool).sum())}."
        )
        out.append("")
    notes = []
    if "counter_mismatch" in runs:
        for _, r in runs.dropna(subset=["counter_mismatch"]).iterrows():
            notes.append(f"- counter mismatch in `{r['run_id']}`: {r['counter_mismatch']}")
    if "lossless_fraction" in runs:
        lossy = runs[runs["lossless_fraction"].notna() & (runs["lossless_fraction"] < 1)]
        for _, r in lossy.iterrows():
            notes.append(
                f"- `{r['run_id']}`: only {num(r['lossless_fraction'])} of outputs equal "
                "the target's own (greedy speculative decoding should be lossless)"
            )
    return out + (["Warnings:", "", *notes, ""] if notes else [])


def _trust(groups: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """Provenance per distinct (commit, versions, hardware), draft sampling, losses,
    lucky truncations, speedup notes and the spread across repeats."""
    commit = runs.get("git_commit", pd.Series("?", index=runs.index)).fillna("?").astype(str)
    dirty = runs.get("git_dirty", pd.Series(False, index=runs.index)).fillna(False).astype(bool)
    prov = pd.DataFrame({
        "commit": commit.str[:12] + np.where(dirty, " (dirty)", ""),
        "versions": aggregate.versions_id(runs), "hardware": aggregate.hardware_id(runs),
        "config": runs["variant"] + " K=" + runs["k"].astype(str),
    })  # fmt: skip
    rows = prov.groupby(["commit", "versions", "hardware"], sort=True).agg(
        runs=("config", "size"), configurations=("config", lambda c: ", ".join(sorted(set(c))))
    ).reset_index()  # fmt: skip
    out = ["## Provenance", "", table(rows, [(c, _col(c)) for c in rows.columns]), ""]
    for what in ("hardware", "versions"):
        if prov[what].nunique() > 1:
            out += [f"**Warning: the runs differ in {what}**; speedups are never computed "
                    "across hardware (see the notes below).", ""]  # fmt: skip
    spec = runs[runs["k"] > 0] if "draft_sample_method" in runs else runs.iloc[:0]
    methods = spec["draft_sample_method"].fillna("not recorded").value_counts()
    if len(methods):
        said = ", ".join(f"{m} ({n} runs)" for m, n in methods.items())
        out += [f"Draft sampling of the K > 0 runs (vLLM `draft_sample_method`): {said}.", ""]
    notes = []
    for _, r in groups.iterrows():
        name = f"{r['series']} K={r['k']} conc. {r['concurrency']} on {r['dataset']}"
        if r.get("num_missing", 0) or r.get("num_failed", 0):
            notes.append(f"- {name}: {num(r['num_missing'], 0)} problem(s) missing and "
                         f"{num(r['num_failed'], 0)} request(s) failed")  # fmt: skip
        if r.get("n_truncated_fallback_correct", 0):
            notes.append(f"- {name}: {num(r['n_truncated_fallback_correct'], 0)} truncated "
                         "answer(s) graded correct by a fallback extractor")  # fmt: skip
        if r.get("n_short_proposals", 0):
            notes.append(f"- {name}: {num(r['n_short_proposals'], 0)} request(s) had verify "
                         "steps with fewer than K drafts; its per-position acceptance counts "
                         "K drafts a step, so positions past a short proposal count as "
                         "rejected")  # fmt: skip
        if r.get("speedup_note"):
            notes.append(f"- {name}: {r['speedup_note']}")
        drift = r.get("reference_drift")
        if sentinel.is_flagged(drift, r.get("pairing")):
            notes.append(f"- {name}: the drift sentinel moved {drift:+.1%} within a run "
                         f"(more than {sentinel.threshold(r.get('pairing')):.0%}); its "
                         "timings are suspect")  # fmt: skip
        if r.get("boot_dropped", 0):
            notes.append(f"- {name}: up to {num(r['boot_dropped'], 0)} bootstrap replicate(s) "
                         "of a statistic drew only problems with a zero denominator and were "
                         "left out of its interval")  # fmt: skip
        shift = r.get("reference_shift")
        if sentinel.is_flagged(shift):
            notes.append(f"- {name}: the drift sentinel read {shift:+.1%} against the sweep's "
                         "median for this target: the machine ran at another speed during "
                         "this run than during the others")  # fmt: skip
        spread = r.get("reference_spread")
        if sentinel.is_flagged(spread):
            notes.append(f"- {name}: the drift sentinel differs by {spread:.1%} across its "
                         "runs (the machine changed speed between repeats)")  # fmt: skip
    out += ["Notes:", "", *notes, ""] if notes else []
    rep = groups[groups.get("n_repeats", pd.Series(0, index=groups.index)) > 1]
    if len(rep):
        out += ["## Repeats", "", "Configurations run with several seeds: each speedup's "
                "median [min, max] across seeds (each seed against its own pairs when "
                "interleaved, else the baseline's same seed), beside the 95% CI over "
                "problems, which leaves time drift out; acceptance mean ± std.", "",
                table(rep, [("dataset", _col("dataset")), ("variant", _col("series")),
                            ("conc.", _col("concurrency")), ("load", _load),
                            ("K", _col("k")), ("pairing", _pairing),
                            ("repeats", _col("n_repeats", 0)),
                            *[(label, lambda r, s=name: f"{num(r[f'{s}_repeat_median'], 2)} "
                               f"[{num(r[f'{s}_repeat_min'], 2)}, {num(r[f'{s}_repeat_max'], 2)}]")
                              for label, name in (("TPOT speedup", "speedup_tpot"),
                                                  ("e2e speedup", "speedup_e2e"),
                                                  ("tok/s speedup", "speedup_tokens_per_s"))],
                            ("TPOT speedup CI", lambda r: ci(r, "speedup_tpot", 2)),
                            ("accept. rate", lambda r: f"{num(r['acceptance_rate_repeat_mean'])} ± "
                             f"{num(r['acceptance_rate_repeat_std'])}")]), ""]  # fmt: skip
    return out


def _instances(table_: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """Each speedup over several engine instances, instance by instance, and what the runs
    of those sweeps cost."""
    rows = table_[table_["instance_speedups"].notna()] if "instance_speedups" in table_ else []
    if not len(rows):
        return []
    cost = runs[runs["sweep_id"].isin(rows["sweep_id"])].sort_values(["sweep_id", "run_id"])
    return ["## Engine instances", "",
            "The TPOT speedup of each engine instance (pair) alone, in instance order: "
            "the plain engine started first at instances 0, 2, ..., the job's own at 1, 3, "
            "...; a K = 0 row's is the A/A ratio. Spread: max / min - 1.", "",
            table(rows, [("dataset", _col("dataset")), ("variant", _col("series")),
                         ("K", _col("k")), ("N", _col("instances")),
                         ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 3)),
                         ("per instance", lambda r: " ".join(
                             f"{float(x):.3f}" for x in r["instance_speedups"].split())),
                         ("spread", lambda r: num(r["instance_spread"], 3))]), "",
            "What each run of those sweeps cost (start-up: the starts and warm-ups of the "
            "job's own engines, as many again for the paired plain engines, which are not "
            "timed; measured: its requests):", "",
            table(cost, [("sweep", _col("sweep_id")), ("run", lambda r: f"`{r['run_id']}`"),
                         ("N", _col("instances")),
                         ("start-up s", lambda r: num(r["engine_start_s"], 1)),
                         ("measured s", lambda r: num(r["wall_s"], 1))]), ""]  # fmt: skip


def _training(table_: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The rows of each trained speculator (a target's variant) that ran with more than one
    training set, beside what its manifest says it was trained on."""
    columns = [f"draft_{name}" for name in load.DRAFT_TRAINING]
    if "draft_examples" not in runs or runs["draft_examples"].isna().all():
        return []
    group = list(aggregate.GROUP)
    trained = runs.astype({c: table_[c].dtype for c in group}).dropna(subset=["draft_examples"])
    rows = table_.merge(
        trained.groupby(group, dropna=False)[columns].first().reset_index(), on=group
    )
    rows = rows[rows.groupby(["target", "variant"])["draft_examples"].transform("nunique") > 1]
    if rows.empty:
        return []
    rows = rows.sort_values(["target", "variant", "draft_examples", "k", "series"])
    return ["## Speculators against their training data", "",
            "Each trained speculator that ran with more than one training set, by the "
            "number of examples it was trained on (its manifest: for a head, its target's "
            "own answers), its optimiser steps, training seconds and held-back accuracy per "
            "draft step (measured on each build's own held-back answers, so not comparable "
            "across builds; acceptance is, on the same problems).", "",
            table(rows, [("variant", _col("series")), ("examples", lambda r: f"{r['draft_examples']:,.0f}"),
                         ("steps", lambda r: f"{r['draft_steps']:,.0f}"),
                         ("train s", lambda r: num(r["draft_train_seconds"], 0)),
                         ("held-back accuracy", lambda r: " / ".join(
                             f"{a:.2f}" for a in r["draft_eval_accuracy"] or []) or "–"),
                         ("K", _col("k")), ("N", _col("instances")),
                         ("acceptance", lambda r: ci(r, "acceptance_rate", 3)),
                         ("mean acceptance length", lambda r: ci(r, "mean_acceptance_length", 2)),
                         ("TPOT speedup", lambda r: ci(r, "speedup_tpot", 3))]), ""]  # fmt: skip


def _outcome(r: pd.Series) -> str:
    """What became of a flagged run."""
    if not r["reruns"]:
        return "kept flagged, not re-run" if r["flagged"] else "not re-run, within the bound now"
    return f"re-run {r['reruns']}x, " + ("kept flagged" if r["flagged"] else "replaced")


def _flagged(flagged: pd.DataFrame, reruns: Mapping[str, Any] | None) -> list[str]:
    """Every run the drift sentinel flagged (``flagged``: now), its drift and what became of
    it (``reports.sentinel.outcomes``); ``reruns``: a study's ``sentinel`` record."""
    rows = sentinel.outcomes(flagged, reruns)
    limit = f" (re-runs allowed per run: {reruns['rerun_flagged']})" if reruns else ""
    bounds = (f"{sentinel.DRIFT_INTERLEAVED:.0%} (interleaved; its pairs cancel a smaller "
              f"drift) or {sentinel.DRIFT:.0%} (sequential)")  # fmt: skip
    if rows.empty:
        return ["## Flagged runs", "",
                f"No run's drift sentinel moved more than {bounds}{limit}.", ""]  # fmt: skip
    return ["## Flagged runs", "",
            f"Runs whose fixed reference request moved more than {bounds} between "
            f"the run's start and end, now or under the bound the study ran with: the "
            f"machine changed speed during it{limit}. Drift: "
            "each attempt's, the kept run's last; replaced: the last attempt, within "
            "the bound, is the run every table uses. A run kept flagged stays in "
            "every table; each verdict widens its speedup interval by its drift "
            "(docs/METRICS.md).", "",
            table(rows, [("sweep", _col("sweep_id")), ("run", lambda r: f"`{r['run_id']}`"),
                         ("drift", lambda r: ", ".join(f"{d:+.1%}" for d in r["drifts"])),
                         ("outcome", _outcome)]), ""]  # fmt: skip


def _skipped(skipped: Sequence) -> list[str]:
    if not skipped:
        return []
    rows = pd.DataFrame([s.to_row() for s in skipped])
    return ["## Skipped run directories", "",
            table(rows, [("directory", lambda r: f"`{r['path']}`"), ("reason", _col("reason"))]),
            ""]  # fmt: skip


def report(
    t: ReportTables,
    shown: list[Shown],
    source: str,
    sweeps: list[str] | None,
    n_boot: int,
    seed: int,
    out_dir: Path,
    preface: Sequence[str] = (),
    made: Sequence[str] = (),
    reruns: Mapping[str, Any] | None = None,
) -> str:
    """The text of REPORT.md, written into ``out_dir`` (its links relative to it): the
    ``preface`` lines under the title, then what the runs are, the first figure (the
    forest plot of every comparison), the flagged runs (``reruns``: a study's sentinel
    record) and the ``made`` lines."""
    which = ", ".join(sweeps) if sweeps else "all sweeps"
    out = ["# draftbench report", "", *preface]
    lead = [*(_figure(1, shown[0]) if shown else []), *_flagged(t.flagged, reruns), *made]
    if t.table.empty and not t.whatif.empty:
        return "\n".join([*out, *lead, *_whatif(t.whatif), *_figures(shown[1:], 2),
                          *_skipped(t.skipped)])  # fmt: skip
    if t.table.empty:
        out += [f"**No complete runs found** under `{source}` ({which}). Run a sweep first "
                "(`make sweep`), then `make report` again.", "", *_skipped(t.skipped)]  # fmt: skip
        return "\n".join(out)
    n_runs = len(t.runs) + len(t.whatif_runs)
    n_sweeps = len({*t.requests["sweep_id"], *t.whatif_runs.get("sweep_id", ())})
    out += [
        f"{n_runs} runs from {n_sweeps} sweep(s) under `{source}` ({which}): "
        f"{len(t.requests)} requests, {len(t.table)} configurations"
        + (
            f" at their speculators' own acceptance ({len(t.runs)} runs), and "
            f"{len(t.whatif)} what-if configurations at a set acceptance ({len(t.whatif_runs)} "
            "runs, their own section)"
            if len(t.whatif)
            else ""
        )
        + f"; {len(t.skipped)} run director{'y' if len(t.skipped) == 1 else 'ies'} skipped.",
        "",
        *lead,
        *_hypotheses(t.verdicts),
        "## Headline results",
        "",
        "Lowest concurrency of each variant; variants without a draft at K = 0, draft "
        "variants at the K with the highest TPOT speedup. Brackets: 95% CIs. Pairing "
        "`interleaved`: each speedup pairs every request with the same problem on the plain "
        "target seconds apart; a K = 0 row's speedup is then the A/A check (the same engine "
        "started twice and paired), whose distance from 1.00 is the pairing's noise floor. "
        "`sequential`: the speedup divides this run by the K = 0 run, made at another time. "
        "`x N`: the problems were split over N fresh engine instances (pairs), and the "
        "intervals resample instances, then problems.",
        "",
        table(t.headline, HEADLINE),
        "",
        *_instances(t.table, t.runs),
        *_training(t.table, t.runs),
        "## Analytical model vs measurement",
        "",
        "Cost model: predicted TPOT speedup = E x T_target / T_step(K), E from the row's "
        "per-position acceptance, T_target from the K = 0 baseline, T_step(K) from the "
        "calibration (never from the row's own timing), ngram's steps without drafts at "
        "their own calibrated time; beside it the simple model "
        "E/(Kc+1) with c = T_draft / T_target measured. Pre-flight: acceptance predicted "
        "from the K = 0 outputs, before any K > 0 run.",
        "",
        t.model_check,
        "",
        table(t.table[t.table["k"] > 0], PREDICTIONS) if not t.fits.empty else "",
        "",
        "Best K per configuration (K = 0 counts, speedup 1; agrees: the same K, or the "
        "predicted K's measured speedup inside the best K's 95% CI):",
        "",
        table(t.fits, FITS) if not t.fits.empty else "No speculative runs to fit.",
        "",
        *_along(t.table),
        *_serving(t.serving, t.crossovers, t.one_chunk),
        *_schedules(t.schedules, t.schedule_checks),
        *_whatif(t.whatif),
        *_figures(shown[1:], 2),
        "## All configurations",
        "",
        table(t.table, ALL_GROUPS),
        "",
        "## Spec-Bench's definitions beside ours",
        "",
        SPEC_BENCH_NOTE,
        "",
        table(t.table, SPEC_BENCH),
        "",
        *_environment(t.runs),
        *_trust(t.table, t.runs),
        *_skipped(t.skipped),
        "## Definitions",
        "",
        _definitions(out_dir, n_boot, seed),
    ]
    return "\n".join(out)


def simulation_report(sim: Simulation, shown: list[Shown], steps: int, seed: int) -> str:
    """The text of SIMULATION.md."""
    tok = sim.tokens[sim.tokens["k"].isin(sim.ks)]
    pivot = [("a", lambda r: num(r["a"], 2))] + [(f"K={k}", lambda r, k=k: r[k]) for k in sim.ks]
    cells = tok.assign(cell=[f"{num(s, 3)} ± {num(1.96 * e, 3)} (theory {num(t, 3)})"
                             for s, e, t in zip(tok["simulated"], tok["se"], tok["analytical"],
                                                strict=True)])  # fmt: skip
    wide = cells.pivot(index="a", columns="k", values="cell").reset_index()
    breakeven = pd.DataFrame({"a": list(sim.alphas)})
    for k in (1, *sim.ks):
        breakeven[f"K={k}"] = [num(theory.break_even_cost(a, k), 3) for a in sim.alphas]
    agree = sim.best_k["best_k_simulated"] == sim.best_k["best_k_analytical"]
    rule_cols: list[Column] = [
        ("case", _col("case")),
        ("draft sampling", _col("method")),
        ("acceptance: theory", lambda r: num(r["acceptance_theory"], 4)),
        ("simulated", lambda r: num(r["acceptance_simulated"], 4)),
        ("TV(emitted, p)", lambda r: num(r["tv_distance"], 4)),
        ("chi-square", lambda r: f"{num(r['chi_square'], 1)} (99.9%: {num(r['chi_square_999'], 1)})"),
    ]  # fmt: skip
    out = [
        "# Speculative decoding: Monte Carlo vs the analytical model",
        "",
        f"{steps} verify steps per (a, K), seed {seed}, draft sampling `{sim.method}` "
        "(vLLM 0.32 drafts greedily by default). Toy target p and draft q with "
        "acceptance exactly a; every position alike.",
        "",
        "## 1. The accept/reject rule",
        "",
        f"{20 * steps} single-position draws per case: accept x ~ q with probability "
        "min(1, p(x)/q(x)), else emit from the normalised residual max(0, p - q); greedy "
        "drafting is the same rule with q one-hot at argmax q (accept with probability "
        "p(argmax q)). The emitted token must be distributed as p, and the acceptance must "
        "be sum min(p, q) (greedy: p(argmax q)).",
        "",
        table(sim.rules, rule_cols),
        "",
        "## 2. Tokens per verify step",
        "",
        "Simulated mean ± 1.96 SE, and the analytical (1 - a^(K+1)) / (1 - a).",
        "",
        table(wide, pivot),
        "",
        "## 3. When draft cost erases the speedup",
        "",
        "Break-even cost ratio c* = (E - 1) / K: above it, K drafts are slower than plain "
        "decoding.",
        "",
        table(breakeven, [(c, _col(c, 2) if c == "a" else _col(c)) for c in breakeven.columns]),
        "",
        f"Best K over a {len(set(sim.best_k['a']))} x {len(set(sim.best_k['c']))} grid of "
        f"(a, c): simulated argmax equals the analytical one in {int(agree.sum())} of "
        f"{len(agree)} cells; the largest speedup given up where they differ is "
        f"{num(sim.best_k['regret'].max(), 4)}x (near-ties).",
        "",
        *_figures(shown),
    ]
    return "\n".join(out)
