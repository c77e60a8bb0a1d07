"""The report's figures (matplotlib, PNG): one function per figure of the study.

Each ``fig_*`` function draws one figure from the precomputed tables of
:class:`reports.tables.ReportTables` and returns it, or None when its data is absent;
:func:`render_report` saves them and records which were skipped and why. Error bars
are 95% bootstrap CIs over problems. Figures on the analytical model's axes live in
:mod:`reports.theory_figures`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from reports import aggregate, plotting, theory
from reports.plotting import Shown
from reports.theory_figures import fig_theory_best_k, fig_theory_cost, fig_theory_tokens

if TYPE_CHECKING:
    from reports.tables import ReportTables


def _bars(t: ReportTables, stat: str, ylabel: str, title: str) -> Figure | None:
    heads = t.headline.dropna(subset=[stat])
    if heads.empty:
        return None
    datasets = plotting.datasets(heads)
    series = list(dict.fromkeys(heads["series"]))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(datasets) * len(series) ** 0.5 + 3), 4.2))
    ax.grid(alpha=0.3, axis="y")
    position = {dataset: j for j, (dataset, _) in enumerate(datasets)}
    for i, s in enumerate(series):
        rows = heads[heads["series"] == s]
        x = rows["dataset"].map(position).to_numpy() - 0.4 + width * (i + 0.5)
        ax.bar(x, rows[stat].to_numpy(float), width, yerr=plotting.yerr(rows, stat), capsize=3,
               color=plotting.color(s), label=s)  # fmt: skip
        for xi, k in zip(x, rows["k"], strict=True):
            if k:
                ax.annotate(f"K={k}", (xi, 0), ha="center", va="bottom", fontsize=7, color="w")
    ax.set_xticks(range(len(datasets)), [plotting.title(*d) for d in datasets])
    ax.set_ylabel(ylabel)
    ax.legend(title="variant", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(title)
    fig.tight_layout()
    return fig


def fig_accuracy(t: ReportTables) -> Figure | None:
    """1. Accuracy by variant per dataset."""
    return _bars(t, "accuracy", "accuracy (fraction correct)", "Accuracy by variant (95% CI)")


def fig_output_tokens(t: ReportTables) -> Figure | None:
    """2. Output tokens per answer by variant and dataset."""
    return _bars(
        t, "output_tokens", "output tokens per answer", "Answer length by variant (95% CI)"
    )


def fig_accuracy_vs_tokens(t: ReportTables) -> Figure | None:
    """3. Accuracy against output tokens, one point per variant: the cost/quality frontier."""
    heads = t.headline[t.headline["draft"] == "none"].dropna(subset=["accuracy", "output_tokens"])
    if heads.empty:
        return None
    datasets = plotting.datasets(heads)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for _, r in heads[heads["dataset"] == dataset].iterrows():
            one = r.to_frame().T
            ax.errorbar(
                r["output_tokens"],
                r["accuracy"],
                xerr=plotting.yerr(one, "output_tokens"),
                yerr=plotting.yerr(one, "accuracy"),
                fmt="o",
                ms=7,
                capsize=3,
                color=plotting.color(r["series"]),
                label=r["series"],
            )
            ax.annotate(
                r["series"],
                (r["output_tokens"], r["accuracy"]),
                fontsize=8,
                xytext=(5, 5),
                textcoords="offset points",
            )
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("mean output tokens per answer")
        ax.set_xlim(left=0)
    axes[0, 0].set_ylabel("accuracy (fraction correct)")
    axes[0, 0].set_ylim(0, 1.05)
    return plotting.finish(fig, "Accuracy vs answer length (K = 0; 95% CIs): up and left is better")


def fig_acceptance_vs_k(t: ReportTables) -> Figure | None:
    """4. Acceptance rate and mean acceptance length vs K, with the fitted theory curves."""
    rows = plotting.spec_rows(t.table)
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets), rows=2, sharey="row")
    stats = ((0, "acceptance_rate", theory.modelled_acceptance),
             (1, "mean_acceptance_length", theory.expected_tokens))  # fmt: skip
    for col, (dataset, difficulty) in enumerate(datasets):
        for series, g in rows[rows["dataset"] == dataset].groupby("series", sort=True):
            g = g.sort_values("k")
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            ks = np.arange(1, g["k"].max() + 1)
            style = {"color": plotting.color(series)}
            for row, stat, curve in stats:
                ax = axes[row, col]
                ax.errorbar(g["k"], g[stat], yerr=plotting.yerr(g, stat), fmt=plotting.marker(series) + "-",
                            capsize=3, label=f"{series} measured", **style)  # fmt: skip
                if fit is not None:
                    ax.plot(ks, curve(fit["alpha"], ks), "--", alpha=0.7,
                            label=f"{series} theory (fitted a)", **style)  # fmt: skip
        axes[0, col].set_title(plotting.title(dataset, difficulty))
        axes[1, col].set_xlabel("K (draft tokens per verify step)")
    axes[0, 0].set_ylabel("acceptance rate\n(accepted / proposed)")
    axes[1, 0].set_ylabel("mean acceptance length\n(tokens per verify step)")
    for ax in axes.flat:
        ax.xaxis.get_major_locator().set_params(integer=True)
    return plotting.finish(fig, "Draft acceptance vs K (95% CIs); dashed: theory with the fitted a "
                   "(values in the fits table)", legend_below=True)  # fmt: skip


def fig_speedup_vs_k(t: ReportTables) -> Figure | None:
    """5. TPOT and e2e speedup vs K, measured with CIs, predicted, best K marked."""
    rows = plotting.spec_rows(t.table).dropna(subset=["speedup_tpot"])
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets), rows=2, sharey="row")
    for col, (dataset, difficulty) in enumerate(datasets):
        for series, g in rows[rows["dataset"] == dataset].groupby("series", sort=True):
            g = g.sort_values("k")
            style = {"color": plotting.color(series)}
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            for row, stat in ((0, "speedup_tpot"), (1, "speedup_e2e")):
                ax = axes[row, col]
                err = np.hstack([[[0], [0]], plotting.yerr(g, stat)]).tolist()
                ax.errorbar(np.concatenate([[0], g["k"]]), np.concatenate([[1.0], g[stat]]),
                            yerr=err, fmt=plotting.marker(series) + "-", capsize=3,
                            label=f"{series} measured", **style)  # fmt: skip
                best = g.loc[g[stat].idxmax()]
                if best[stat] > 1:
                    ax.plot(best["k"], best[stat], "*", ms=16, mec="k",
                            label="measured best K", **style)  # fmt: skip
                if fit is not None and row == 0 and np.isfinite(fit["c"]):
                    grid = np.arange(0, g["k"].max() + 3)
                    curve = theory.predicted_speedup(fit["alpha"], grid, max(fit["c"], 0.0))
                    ax.plot(grid, curve, "--", alpha=0.7, label=f"{series} predicted", **style)
        for row in (0, 1):
            axes[row, col].axhline(1.0, color="k", lw=0.8)
        axes[0, col].set_title(plotting.title(dataset, difficulty))
        axes[1, col].set_xlabel("K (draft tokens per verify step)")
    axes[0, 0].set_ylabel("TPOT speedup (x, vs K = 0)")
    axes[1, 0].set_ylabel("end-to-end speedup (x, vs K = 0)")
    for ax in axes.flat:
        ax.xaxis.get_major_locator().set_params(integer=True)
    return plotting.finish(
        fig,
        "Speedup vs K (95% CIs); dashed: E/(Kc+1) with the pooled a and the calibrated c "
        "(values and best K in the fits table)",
        legend_below=True,
    )


def fig_positions(t: ReportTables) -> Figure | None:
    """6. Conditional acceptance per draft position (largest K of each variant)."""
    pos = plotting.lowest_concurrency(t.positions)
    if pos.empty:
        return None
    pos = pos[pos["k"] == pos.groupby(["sweep_id", "variant", "dataset"])["k"].transform("max")]
    datasets = plotting.datasets(pos)
    fits = plotting.theory_by_config(t)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for series, g in pos[pos["dataset"] == dataset].groupby("series", sort=True):
            ax.errorbar(
                g["position"],
                g["acceptance"],
                yerr=plotting.yerr(
                    g.rename(columns={"lo": "acceptance_lo", "hi": "acceptance_hi"}), "acceptance"
                ),
                fmt="o-",
                capsize=3,
                color=plotting.color(series),
                label=f"{series} (K={g['k'].iloc[0]})",
            )
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            if fit is not None:
                ax.axhline(fit["alpha"], color=plotting.color(series), ls="--", alpha=0.6)
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("draft position i")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("P(accept i | 1..i-1 accepted)")
    return plotting.finish(fig, "Per-position conditional acceptance (95% CIs); dashed: fitted a")


def fig_speedup_vs_concurrency(t: ReportTables) -> Figure | None:
    """7. TPOT speedup vs concurrency, where a sweep ran several concurrencies."""
    rows = t.table[(t.table["k"] > 0) & (t.table["draft"] != "none")].dropna(
        subset=["speedup_tpot"]
    )
    n = rows.groupby(["sweep_id", "variant", "dataset", "k"])["concurrency"].transform("nunique")
    rows = rows[n > 1]
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = rows[rows["dataset"] == dataset]
        for (series, k), g in sub.groupby(["series", "k"], sort=True):
            g = g.sort_values("concurrency")
            shade = 0.35 + 0.65 * k / sub["k"].max()
            ax.errorbar(
                g["concurrency"],
                g["speedup_tpot"],
                yerr=plotting.yerr(g, "speedup_tpot"),
                fmt="o-",
                capsize=3,
                color=plotting.color(series),
                alpha=shade,
                label=f"{series} K={k}",
            )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        levels = sorted(sub["concurrency"].unique())
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("concurrency (requests in flight)")
        ax.legend(fontsize=7, ncol=2)
    axes[0, 0].set_ylabel("TPOT speedup (x, vs K = 0)")
    return plotting.finish(fig, "Speedup vs concurrency (95% CIs): where batching erases the win")


def fig_latency_cdf(t: ReportTables) -> Figure | None:
    """8. End-to-end latency CDFs: each draft variant at its best K vs its K = 0 baseline."""
    heads = t.headline[(t.headline["draft"] != "none") & (t.headline["k"] > 0)]
    if heads.empty:
        return None
    datasets = plotting.datasets(heads)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for _, h in heads[heads["dataset"] == dataset].iterrows():
            base = aggregate.select(t.requests, h, aggregate.BASELINE)
            base = base[base["k"] == 0]
            for data, ls, label in (
                (base, "-", f"{h['target_role']} target, K=0"),
                (aggregate.select(t.requests, h), "--", f"{h['series']}, K={h['k']}"),
            ):
                x = np.sort(data["e2e_s"].dropna().to_numpy())
                if len(x):
                    ax.step(
                        x,
                        np.arange(1, len(x) + 1) / len(x),
                        ls,
                        where="post",
                        color=plotting.color(h["series"]),
                        label=label,
                    )
        ax.set_title(plotting.title(dataset, difficulty))
        ax.set_xlabel("end-to-end latency (s)")
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("fraction of requests")
    return plotting.finish(fig, "Latency CDF: baseline (solid) vs best K (dashed)")


def fig_rejections(t: ReportTables) -> Figure | None:
    """9. Which kinds of tokens the draft is rejected on."""
    rej = t.rejections
    if rej.empty:
        return None
    from reports.rejections import KINDS

    datasets = plotting.datasets(rej)
    fig, axes = plotting.panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = rej[rej["dataset"] == dataset]
        series = list(dict.fromkeys(sub["series"]))
        width = 0.8 / max(len(series), 1)
        for i, s in enumerate(series):
            g = sub[sub["series"] == s].set_index("kind").reindex(list(KINDS))
            ax.bar(
                np.arange(len(KINDS)) - 0.4 + width * (i + 0.5),
                g["share"],
                width,
                color=plotting.color(s),
                label=f"{s} ({int(g['count'].sum())} rejections)",
            )
        ax.set_xticks(range(len(KINDS)), KINDS, rotation=30)
        ax.set_title(plotting.title(dataset, difficulty))
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("share of rejected draft positions")
    return plotting.finish(
        fig, "What the draft gets rejected on (token the target emitted instead)"
    )


REPORT_FIGURES: tuple[tuple[str, str, Callable[[ReportTables], Figure | None], str], ...] = (
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
        "TPOT and end-to-end speedup against K, measured (CIs) and predicted "
        "E/(Kc+1); stars mark the measured best K.",
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
        "TPOT speedup against concurrency, where a sweep ran more than one concurrency.",
        fig_speedup_vs_concurrency,
        "no sweep ran more than one concurrency",
    ),
    (
        "latency_cdf",
        "Distribution of end-to-end latency: K = 0 baseline against the best K.",
        fig_latency_cdf,
        "no speculative runs",
    ),
    (
        "rejection_kinds",
        "Kinds of token the draft was rejected on, CoT vs CoD drafts.",
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
    """Draw every report figure into ``out``; absent data gives a skipped entry."""
    if t.table.empty:
        return [Shown(name, caption, None, "no runs") for name, caption, _, _ in REPORT_FIGURES]
    return [
        plotting.save(fn(t), out, name, caption, note) for name, caption, fn, note in REPORT_FIGURES
    ]
