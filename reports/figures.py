"""The report's figures (matplotlib, PNG): one function per figure of the study.

Each ``fig_*`` function draws one figure from the precomputed tables of
:class:`reports.tables.ReportTables` and returns it, None when its data is absent, or a
string saying why there is nothing to draw (accuracy 0 in every row);
:func:`render_report` saves them and records which were skipped and why. Error bars
are 95% bootstrap CIs over problems. Figures on the analytical model's axes live in
:mod:`reports.theory_figures`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from reports import aggregate, plotting, serving, theory
from reports.load import CLOSED_LOOP, FIXED_K
from reports.plotting import Shown
from reports.theory_figures import fig_theory_best_k, fig_theory_cost, fig_theory_tokens

if TYPE_CHECKING:
    from reports.tables import ReportTables


def fig_forest(t: ReportTables) -> Figure | None:
    """Every comparison's TPOT speedup with its 95% CI, one row each, grouped by sweep: the
    A/A checks (interleaved K = 0 rows), the speculative rows and the what-if rows, over
    the sweep's A/A band (its A/A checks' CIs, low to high)."""
    table = t.table
    aa = table[(table["k"] == 0) & (table["pairing"] == "interleaved")].assign(_kind=0)
    spec = table[(table["k"] > 0) & (table["draft"] != "none")].assign(_kind=1)
    whatif = t.whatif.assign(_kind=2) if not t.whatif.empty else None
    rows = pd.concat([aa, spec, whatif]).dropna(subset=["speedup_tpot"])
    if rows.empty:
        return None
    order = ["sweep_id", "dataset", "_kind", "series", "instances", "k", "k_schedule",
             "concurrency", "request_rate", "synthetic_acceptance_length"]  # fmt: skip
    rank = {s: i for i, s in enumerate(plotting.sweeps(rows))}
    rows = rows.sort_values(
        [c for c in order if c in rows], key=lambda c: c.map(rank) if c.name == "sweep_id" else c
    ).assign(y=np.arange(len(rows)))
    varying = {c for c in ("concurrency", "request_rate", "pairing", "instances", "n_repeats")
               if c in rows and rows[c].nunique() > 1}  # fmt: skip
    labels = [_forest_label(r, varying) for _, r in rows.iterrows()]
    size = (5.0 + 0.06 * max(map(len, labels)), max(3.0, 1.4 + 0.27 * len(rows)))
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    ax.grid(alpha=0.3, axis="x")
    checks = rows[rows["_kind"] == 0]
    for sweep, g in rows.groupby("sweep_id", sort=False):
        top, bottom = g["y"].min() - 0.5, g["y"].max() + 0.5
        if top > 0:
            ax.axhline(top, color="0.4", lw=0.8)
        band = checks[checks["sweep_id"] == sweep]
        if not band.empty:
            lo, hi = band["speedup_tpot_lo"].min(), band["speedup_tpot_hi"].max()
            ax.add_patch(Rectangle((lo, top), hi - lo, bottom - top, color="0.6", alpha=0.35,
                                   lw=0, label="A/A check (K = 0 pairs), 95% CI"))  # fmt: skip
    sweeps = plotting.sweeps(rows)
    for (series, kind), g in rows.groupby(["series", "_kind"], sort=False):
        tone = "0.35" if kind == 0 else plotting.color(series)
        ax.errorbar(g["speedup_tpot"], g["y"], xerr=plotting.yerr(g, "speedup_tpot"),
                    fmt=plotting.marker(series, sweeps), capsize=3, color=tone)  # fmt: skip
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(rows["y"], labels, fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("TPOT speedup (x, vs K = 0)")
    shaded = "; shaded: the sweep's A/A checks" if not checks.empty else ""
    return plotting.finish(fig, f"TPOT speedup of every comparison (95% CIs){shaded}")


def _forest_label(r: pd.Series, varying: set[str]) -> str:
    """What the row compares (A/A, speculation or what-if), series, dataset and K, and what
    else tells the row apart."""
    parts = [f"A/A: {r['series']}" if r["_kind"] == 0 else r["series"], r["dataset"]]
    if r["_kind"]:
        parts.append(f"K={r['k']}")
    if r["_kind"] == 2:
        parts.append(f"what-if length {r['synthetic_acceptance_length']:g}")
    schedule = r.get("k_schedule")
    if isinstance(schedule, str) and schedule != "none":
        parts.append(f"K by batch {schedule}")
    said = {"concurrency": lambda v: f"concurrency {v:g}", "pairing": str,
            "request_rate": lambda v: "closed loop" if v == 0 else f"{v:g} req/s",
            "instances": lambda v: f"N={v:g}", "n_repeats": lambda v: f"{v:g} repeats"}  # fmt: skip
    parts += [say(r[c]) for c, say in said.items() if c in varying and pd.notna(r.get(c))]
    return ", ".join(str(p) for p in parts)


def _all_wrong(rows: pd.DataFrame) -> bool:
    """True when every row's accuracy, CI included, is 0: an accuracy figure shows nothing."""
    cols = [c for c in ("accuracy", "accuracy_lo", "accuracy_hi") if c in rows]
    return bool((rows[cols].fillna(0).to_numpy() == 0).all())


NOTHING_RIGHT = "accuracy is 0 in every row (every answer graded wrong): nothing to draw"


def _bars(t: ReportTables, stat: str, ylabel: str, title: str) -> Figure | str | None:
    heads = t.headline.dropna(subset=[stat])
    if heads.empty:
        return None
    if stat == "accuracy" and _all_wrong(heads):
        return NOTHING_RIGHT
    datasets = plotting.datasets(heads)
    bars = list(plotting.traces(heads, heads))
    sweeps = plotting.sweeps(heads)
    width = 0.8 / len(bars)
    size = (max(6.0, 1.2 * len(datasets) * len(bars) ** 0.5 + 1), 4.2)
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    ax.grid(alpha=0.3, axis="y")
    position = {dataset: j for j, (dataset, _) in enumerate(datasets)}
    for i, (label, _, rows) in enumerate(bars):
        x = rows["dataset"].map(position).to_numpy() - 0.4 + width * (i + 0.5)
        ax.bar(x, rows[stat].to_numpy(float), width, yerr=plotting.yerr(rows, stat), capsize=3,
               label=label, **plotting.bar_style(rows["series"].iloc[0], sweeps))  # fmt: skip
        for xi, k in zip(x, rows["k"], strict=True):
            if k:
                ax.annotate(f"K={k}", (xi, 0), ha="center", va="bottom", fontsize=7, color="w")
    ax.set_xticks(range(len(datasets)), [plotting.title(*d) for d in datasets])
    ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    return plotting.finish(fig, title)


def fig_accuracy(t: ReportTables) -> Figure | str | None:
    """Accuracy by variant per dataset."""
    return _bars(t, "accuracy", "accuracy (fraction correct)", "Accuracy by variant (95% CI)")


def fig_output_tokens(t: ReportTables) -> Figure | None:
    """Output tokens per answer by variant and dataset."""
    return _bars(
        t, "output_tokens", "output tokens per answer", "Answer length by variant (95% CI)"
    )


def fig_accuracy_vs_tokens(t: ReportTables) -> Figure | str | None:
    """Accuracy against output tokens, one point per variant: the cost/quality frontier."""
    heads = t.headline[t.headline["draft"] == "none"].dropna(subset=["accuracy", "output_tokens"])
    if heads.empty:
        return None
    if _all_wrong(heads):
        return NOTHING_RIGHT
    datasets = plotting.datasets(heads)
    sweeps = plotting.sweeps(heads)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for _, r in heads[heads["dataset"] == dataset].iterrows():
            one = r.to_frame().T
            ax.errorbar(
                r["output_tokens"],
                r["accuracy"],
                xerr=plotting.yerr(one, "output_tokens"),
                yerr=plotting.yerr(one, "accuracy"),
                fmt=plotting.marker(r["series"], sweeps),
                ms=7,
                capsize=3,
                color=plotting.color(r["series"]),
                label=r["series"],
            )
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("mean output tokens per answer")
        ax.set_xlim(left=0)
    plotting.ylabel(axes[0], "accuracy (fraction correct)")
    axes[0, 0].set_ylim(0, 1.05)
    return plotting.finish(fig, "Accuracy vs answer length (K = 0; 95% CIs): up and left is better")


def fig_acceptance_vs_k(t: ReportTables) -> Figure | None:
    """Acceptance rate and mean acceptance length vs K, with the fitted theory curves."""
    rows = plotting.spec_rows(t.table)
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets), stats=2, sharey="row")
    stats = ((0, "acceptance_rate", theory.modelled_acceptance),
             (1, "mean_acceptance_length", theory.expected_tokens))  # fmt: skip
    fitted = False
    ks: set[int] = set()
    for col, (dataset, difficulty) in enumerate(datasets):
        lines = list(plotting.traces(rows[rows["dataset"] == dataset], rows))
        for i, (label, style, g) in enumerate(lines):
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            grid = np.arange(1, g["k"].max() + 1)
            ks |= set(g["k"]) | (set(grid) if fit is not None else set())
            x = g["k"] + plotting.dodge(i, len(lines))
            for row, stat, curve in stats:
                ax = axes[row, col]
                ax.errorbar(x, g[stat], yerr=plotting.yerr(g, stat), capsize=3, label=label,
                            **style)  # fmt: skip
                if fit is not None:
                    ax.plot(grid, curve(fit["alpha"], grid), "--", alpha=0.7, color=style["color"])
                    fitted = True
        axes[0, col].set_title(plotting.title(dataset, difficulty))
    for col in range(len(datasets)):  # one K range for every panel
        plotting.k_axis(axes[0, col], ks, label=None)
        plotting.k_axis(axes[1, col], ks)
    plotting.ylabel(axes[0], "acceptance rate\n(accepted / proposed)")
    plotting.ylabel(axes[1], "mean acceptance length\n(tokens per verify step)")
    if not fitted:
        return plotting.finish(fig, "Draft acceptance vs K (95% CIs)")
    return plotting.finish(
        fig,
        "Draft acceptance vs K (95% CIs); dashed: theory with the fitted a (values in the fits "
        "table)",
        {"theory, fitted a": plotting.key(ls="--")},
    )


def fig_speedup_vs_k(t: ReportTables) -> Figure | None:
    """TPOT and e2e speedup vs K, measured with CIs, predicted, best K marked; one K range
    for every panel."""
    rows = plotting.spec_rows(t.table).dropna(subset=["speedup_tpot"])
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets), stats=2, sharey="row")
    keys: dict[str, Line2D] = {}
    ks = {0}
    for col, (dataset, difficulty) in enumerate(datasets):
        lines = list(plotting.traces(rows[rows["dataset"] == dataset], rows))
        for i, (label, style, g) in enumerate(lines):
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            ks |= set(g["k"])
            x = np.concatenate([[0], g["k"]]) + plotting.dodge(i, len(lines))
            for row, stat in ((0, "speedup_tpot"), (1, "speedup_e2e")):
                ax = axes[row, col]
                err = np.hstack([[[0], [0]], plotting.yerr(g, stat)]).tolist()
                ax.errorbar(x, np.concatenate([[1.0], g[stat]]), yerr=err, capsize=3,
                            label=label, **style)  # fmt: skip
                best = g[stat].to_numpy(float).argmax()
                if g[stat].iloc[best] > 1:
                    ax.plot(
                        x[best + 1],
                        g[stat].iloc[best],
                        "*",
                        ms=20,
                        mfc="none",
                        mew=1.2,
                        mec=style["color"],
                        zorder=1,
                    )  # around the series' own marker
                    keys["measured best K"] = plotting.key(marker="*", ls="", ms=12, mfc="none")
                if fit is not None and row == 0 and np.isfinite(fit["c"]):
                    grid = np.arange(0, g["k"].max() + 3)
                    curve = theory.predicted_speedup(fit["alpha"], grid, max(fit["c"], 0.0))
                    ax.plot(grid, curve, "--", alpha=0.7, color=style["color"])
                    ks |= set(grid)
                    keys["predicted E/(Kc+1)"] = plotting.key(ls="--")
        axes[0, col].set_title(plotting.title(dataset, difficulty))
    for col in range(len(datasets)):
        for row in (0, 1):
            axes[row, col].axhline(1.0, color="k", lw=0.8)
            plotting.k_axis(axes[row, col], ks, label=None if row == 0 else plotting.K_LABEL)
    plotting.ylabel(axes[0], "TPOT speedup\n(x, vs K = 0)")
    plotting.ylabel(axes[1], "end-to-end speedup\n(x, vs K = 0)")
    dashed = (
        "; dashed: E/(Kc+1) with the pooled a and the calibrated c (values and best K in the "
        "fits table)"
        if "predicted E/(Kc+1)" in keys
        else ""
    )
    return plotting.finish(fig, f"Speedup vs K (95% CIs){dashed}", keys)


def fig_positions(t: ReportTables) -> Figure | None:
    """Conditional acceptance per draft position (largest K of each variant)."""
    pos = plotting.lowest_concurrency(t.positions)
    if pos.empty:
        return None
    pos = pos[pos["k"] == pos.groupby(["sweep_id", "variant", "dataset"])["k"].transform("max")]
    datasets = plotting.datasets(pos)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets))
    fitted = False
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = pos[pos["dataset"] == dataset]
        lines = list(plotting.traces(sub, pos))
        for i, (label, style, g) in enumerate(lines):
            series = g["series"].iloc[0]
            g = g.sort_values("position")
            ax.errorbar(
                g["position"] + plotting.dodge(i, len(lines)),
                g["acceptance"],
                yerr=plotting.yerr(
                    g.rename(columns={"lo": "acceptance_lo", "hi": "acceptance_hi"}), "acceptance"
                ),
                capsize=3,
                label=f"{label} (K={g['k'].iloc[0]})",
                **style,
            )
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            if fit is not None:
                ax.axhline(fit["alpha"], color=plotting.color(series), ls="--", alpha=0.6)
                fitted = True
        ax.set_title(plotting.title(dataset, difficulty))
        plotting.k_axis(ax, sub["position"], label="draft position i")
    plotting.ylabel(axes[0], "P(accept i | 1..i-1 accepted)")
    title = "Per-position conditional acceptance (95% CIs)"
    if not fitted:
        return plotting.finish(fig, title)
    return plotting.finish(fig, f"{title}; dashed: fitted a", {"fitted a": plotting.key(ls="--")})


def fig_speedup_vs_concurrency(t: ReportTables) -> Figure | None:
    """Closed-loop TPOT speedup vs concurrency of each speculator configuration (K, K
    schedule) run at two or more, across the report's sweeps where they ran different
    concurrencies (:func:`reports.serving.by_concurrency`)."""
    table = t.table
    rows = table[(table["k"] > 0) & (table["draft"] != "none")
                 & (table["request_rate"] == CLOSED_LOOP)].dropna(subset=["speedup_tpot"])  # fmt: skip
    lines = serving.by_concurrency(rows, ["variant", "dataset", "k", "k_schedule"])
    if not lines:
        return None
    named = table["sweep_id"].nunique() > 1  # the sweeps behind each line, in its label
    datasets = plotting.datasets(pd.concat([g for _, _, g in lines]))
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        mine = [line for line in lines if line[1][1] == dataset]
        top = max(key[2] for _, key, _ in mine)
        for i, (sweeps, (variant, _, k, ks), g) in enumerate(mine):
            g = g.sort_values("concurrency")
            label = f"{variant} K={k}" + ("" if ks == FIXED_K else f", K by batch {ks}")
            ax.errorbar(
                g["concurrency"] * 2 ** plotting.dodge(i, len(mine)),
                g["speedup_tpot"],
                yerr=plotting.yerr(g, "speedup_tpot"),
                capsize=3,
                alpha=0.35 + 0.65 * k / top,
                color=plotting.color(variant),
                marker=plotting.MARKERS[i % len(plotting.MARKERS)],
                ls="-" if ks == FIXED_K else ":",
                label=f"{label} ({sweeps})" if named else label,
            )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        levels = sorted(pd.concat([g for _, _, g in mine])["concurrency"].unique())
        ax.set_xticks(levels, [f"{c:g}" for c in levels])
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("concurrency (requests in flight)")
    plotting.ylabel(axes[0], "TPOT speedup (x, vs K = 0)")
    return plotting.finish(fig, "Speedup vs concurrency (95% CIs): where batching erases the win")


def fig_latency_cdf(t: ReportTables) -> Figure | None:
    """End-to-end latency CDFs: each draft variant at its best K (dashed) and its K = 0
    baseline (solid: an interleaved group's own pairs, else the K = 0 group of its
    target) in the same colour and marker."""
    heads = t.headline[(t.headline["draft"] != "none") & (t.headline["k"] > 0)]
    if heads.empty:
        return None
    datasets = plotting.datasets(heads)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for label, style, rows in plotting.traces(heads[heads["dataset"] == dataset], heads):
            for _, h in rows.iterrows():
                mine = aggregate.select(t.requests, h)
                if h["pairing"] == "interleaved":
                    base = aggregate.pair_side(mine)
                else:
                    base = aggregate.select(t.requests, h, aggregate.BASELINE)
                    base = base[base["k"] == 0]
                for data, ls, name in ((base, "-", f"{label}: baseline (K=0)"),
                                       (mine, "--", f"{label}, K={h['k']}")):  # fmt: skip
                    x = np.sort(data["e2e_s"].dropna().to_numpy())
                    if len(x):
                        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name,
                                **{**style, "ls": ls}, ms=5, markevery=max(len(x) // 5, 1))  # fmt: skip
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("end-to-end latency (s)")
    plotting.ylabel(axes[0], "fraction of requests")
    return plotting.finish(
        fig, "Latency CDF: each draft variant at its best K (dashed) vs its K = 0 baseline (solid)"
    )


def fig_rejections(t: ReportTables) -> Figure | None:
    """Which kinds of tokens the draft is rejected on."""
    rej = t.rejections
    if rej.empty:
        return None
    from reports.rejections import KINDS

    datasets = plotting.datasets(rej)
    sweeps = plotting.sweeps(rej)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = rej[rej["dataset"] == dataset]
        series = list(dict.fromkeys(sub["series"]))
        width = 0.8 / max(len(series), 1)
        counts = []
        for i, s in enumerate(series):
            g = sub[sub["series"] == s].set_index("kind").reindex(list(KINDS))
            ax.bar(np.arange(len(KINDS)) - 0.4 + width * (i + 0.5), g["share"], width,
                   label=s, **plotting.bar_style(s, sweeps))  # fmt: skip
            counts.append(f"{s} {int(g['count'].sum())}")
        ax.set_xticks(range(len(KINDS)), KINDS, rotation=30)
        counted = textwrap.fill(f"rejections: {', '.join(counts)}", 50)
        ax.set_title(f"{plotting.title(dataset, difficulty)}\n{counted}", fontsize=10)
    plotting.ylabel(axes[0], "share of rejected draft positions")
    return plotting.finish(
        fig, "What the draft gets rejected on (token the target emitted instead)"
    )


def fig_whatif(t: ReportTables) -> Figure | None:
    """The what-if surface: TPOT speedup against the measured mean acceptance length at a
    set acceptance, one line per K, the cost model's prediction dashed."""
    rows = t.whatif.dropna(subset=["speedup_tpot"])
    if rows.empty:
        return None
    series = sorted(rows["series"].unique())
    fig, axes = plotting.panels(len(series))
    ks = sorted(rows["k"].unique())
    tones = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(ks)))
    keys: dict[str, Line2D] = {}
    for col, name in enumerate(series):
        ax = axes[0, col]
        for k, tone in zip(ks, tones, strict=True):
            g = rows[(rows["series"] == name) & (rows["k"] == k)].sort_values(
                "mean_acceptance_length"
            )
            if g.empty:
                continue
            x = g["mean_acceptance_length"]
            ax.errorbar(x, g["speedup_tpot"], yerr=plotting.yerr(g, "speedup_tpot"), fmt="o-",
                        capsize=3, color=tone, label=f"K = {k}")  # fmt: skip
            ax.plot(x, g["speedup_tpot_predicted"], "--", color=tone, alpha=0.8)
        keys["cost model"] = plotting.key(ls="--")
        for level in (1.0, 2.0):
            ax.axhline(level, color="k", lw=0.8, ls="-" if level == 1 else ":")
        ax.set_xlabel("mean acceptance length (tokens per verify step)")
        ax.set_title(name)
    plotting.ylabel(axes[0], "TPOT speedup\n(x, vs K = 0)")
    return plotting.finish(fig, "What-if: speedup against acceptance (95% CIs)", keys)


REPORT_FIGURES: tuple[tuple[str, str, Callable[[ReportTables], Figure | None], str], ...] = (
    (
        "speedup_forest",
        "Every comparison's TPOT speedup over K = 0 with its 95% CI: the A/A checks (grey, "
        "K = 0 paired with K = 0), the speculative configurations and the what-if runs; "
        "shaded, where a sweep paired interleaved: the range of its A/A checks' CIs, the "
        "pairing's noise floor.",
        fig_forest,
        "no speedup measured against a K = 0 baseline of the same target",
    ),
    (
        "whatif_surface",
        "What-if runs (drafts accepted at random to a set mean acceptance length, the "
        "speculator's real step costs): measured TPOT speedup per K against the acceptance "
        "length measured, dashed the cost model's prediction; dotted: 2x.",
        fig_whatif,
        "no what-if runs (spec.synthetic_acceptance_length)",
    ),
    (
        "accuracy_by_variant",
        "Accuracy of each variant per dataset; draft variants at their best "
        "K, 95% bootstrap CIs over problems.",
        fig_accuracy,
        "no graded requests",
    ),
    (
        "output_tokens_by_variant",
        "Mean output tokens per answer by variant: what CoD saves over CoT.",
        fig_output_tokens,
        "no requests",
    ),
    (
        "accuracy_vs_tokens",
        "Accuracy against answer length per variant (K = 0): the cost/quality frontier.",
        fig_accuracy_vs_tokens,
        "no runs without a draft",
    ),
    (
        "acceptance_vs_k",
        "Acceptance rate and mean acceptance length against K per draft "
        "variant, with the theory curves for the fitted a.",
        fig_acceptance_vs_k,
        "no speculative runs (K > 0)",
    ),
    (
        "speedup_vs_k",
        "TPOT and end-to-end speedup against K, measured (CIs) and, where a calibration "
        "measured c, predicted E/(Kc+1); stars mark the measured best K.",
        fig_speedup_vs_k,
        "no speculative runs with a K = 0 baseline of the same target",
    ),
    (
        "acceptance_per_position",
        "Conditional acceptance at each draft position (largest K run "
        "of each draft variant); dashed: the fitted a.",
        fig_positions,
        "no per-request acceptance histograms",
    ),
    (
        "speedup_vs_concurrency",
        "Closed-loop TPOT speedup against concurrency, each K (or K schedule) across the "
        "sweeps that ran it.",
        fig_speedup_vs_concurrency,
        "no configuration ran closed loop at more than one concurrency",
    ),
    (
        "latency_cdf",
        "Distribution of end-to-end latency: each draft variant at its best K (dashed) "
        "against its K = 0 baseline (solid: an interleaved group's own pairs, else the K = 0 "
        "run of its target), both in the variant's colour and its sweep's marker.",
        fig_latency_cdf,
        "no speculative runs",
    ),
    (
        "rejection_kinds",
        "Kinds of token the draft was rejected on, CoT vs CoD drafts (a hatch per sweep).",
        fig_rejections,
        "no run recorded detailed per-step metrics (rejection_tokens)",
    ),
    (
        "theory_tokens_per_step",
        "Measured mean acceptance length on the analytical E(a, K) curves.",
        fig_theory_tokens,
        "no speculative runs",
    ),
    (
        "theory_speedup_vs_cost",
        "Measured TPOT speedup per K beside the cost model E x T_target / T_step(K) "
        "(calibrated step time), the simple model E/(Kc+1) with measured c, and the "
        "pre-flight estimate where it exists.",
        fig_theory_cost,
        "no speculative run with a calibration (python -m harness.sweep.calibrate)",
    ),
    (
        "theory_best_k",
        "Each draft variant's measured a and measured c on the simple model's best-K "
        "map, with its measured best K and the cost model's predicted best K.",
        fig_theory_best_k,
        "no speculative run with a calibration (python -m harness.sweep.calibrate)",
    ),
)


def render_report(t: ReportTables, out: Path) -> list[Shown]:
    """Draw every report figure into ``out``; absent data gives a skipped entry (without
    runs at their own acceptance, every figure but the what-if surface)."""
    return [
        plotting.save(fn(t), out, name, caption, note)
        if not t.table.empty or fn is fig_whatif
        else Shown(name, caption, None, "no runs")
        for name, caption, fn, note in REPORT_FIGURES
    ]
