"""The report's and the simulator's figures (matplotlib, Agg backend, PNG).

Each ``fig_*`` function draws one figure from precomputed tables and returns it, or
returns None when its data is absent; :func:`render_report` and
:func:`render_simulation` save them and say which were skipped and why. Error bars are
95% bootstrap CIs (report) or 1.96 standard errors (simulator).
"""

from __future__ import annotations

import textwrap
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import BoundaryNorm
from matplotlib.figure import Figure

from reports import aggregate, simulate, theory

if TYPE_CHECKING:
    from reports.report import ReportTables

DPI = 110
PANEL = (4.6, 3.6)  # inches per subplot
COLORS = {"base": "#7f7f7f", "cot": "#4c8bd6", "cod": "#f28e2b", "cot_sd": "#0b3d91",
          "cod_sd": "#b3470f"}  # fmt: skip
PALETTE = plt.get_cmap("tab10").colors
MAP_ALPHAS = np.linspace(0.4, 0.98, 117)
MAP_COSTS = np.geomspace(0.005, 1.0, 121)


@dataclass(frozen=True)
class Shown:
    """A figure: its file (None when skipped), its caption, and the reason it was skipped."""

    name: str
    caption: str
    path: Path | None
    note: str = ""


# --------------------------------------------------------------------------- helpers


def _color(series: str) -> str:
    variant = series.rsplit("/", 1)[-1]
    return COLORS.get(variant, PALETTE[zlib.crc32(variant.encode()) % len(PALETTE)])


def _panels(n: int, rows: int = 1, sharey: bool = True) -> tuple[Figure, np.ndarray]:
    width = max(PANEL[0] * n, 6.0)  # room for the title above a single panel
    fig, axes = plt.subplots(rows, n, figsize=(width, PANEL[1] * rows), squeeze=False,
                             sharey=sharey)  # fmt: skip
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    return fig, axes


def _datasets(df: pd.DataFrame) -> list[tuple[str, str]]:
    pairs = df[["dataset", "difficulty"]].drop_duplicates()
    order = pairs["difficulty"].map(aggregate.DIFFICULTY_ORDER).fillna(9)
    return list(pairs.assign(o=order).sort_values(["o", "dataset"])[["dataset", "difficulty"]]
                .itertuples(index=False, name=None))  # fmt: skip


def _title(dataset: str, difficulty: str) -> str:
    return f"{dataset} ({difficulty})"


def _yerr(df: pd.DataFrame, stat: str) -> list[list[float]]:
    """(2, n) distances from each value down to its CI's low end and up to its high end
    (nested lists: matplotlib warns on a (2, 1) array)."""
    value, lo, hi = (df[c].to_numpy(float) for c in (stat, f"{stat}_lo", f"{stat}_hi"))
    return np.abs(np.vstack([value - lo, hi - value])).tolist()


def _finish(fig: Figure, title: str, legend_below: bool = False) -> Figure:
    """Title on top; with ``legend_below``, one legend for all panels under them."""
    width = int(fig.get_figwidth() * 9)  # characters of a 13-point title per inch, roughly
    fig.suptitle("\n".join(textwrap.wrap(title, max(width, 40))), fontsize=13)
    bottom = 0.0
    if legend_below:
        entries = {}
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(label, handle)
        ncol = max(1, min(4, int(fig.get_figwidth() // 3.5)))
        bottom = (0.3 + 0.22 * -(-len(entries) // ncol)) / fig.get_figheight()
        fig.legend(entries.values(), entries.keys(), loc="lower center", ncol=ncol,
                   fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def _marker(series: str) -> str:
    """One marker per sweep when series carry a sweep prefix."""
    sweep = series.rsplit("/", 1)[0] if "/" in series else ""
    return "osD^vP<>"[zlib.crc32(sweep.encode()) % 8] if sweep else "o"


def _lowest_concurrency(df: pd.DataFrame) -> pd.DataFrame:
    keys = ["sweep_id", "variant", "dataset"]
    return df[df["concurrency"] == df.groupby(keys)["concurrency"].transform("min")]


def _spec_rows(table: pd.DataFrame) -> pd.DataFrame:
    return _lowest_concurrency(table[(table["k"] > 0) & (table["draft"] != "none")])


# ---------------------------------------------------------------- report figures


def _bars(t: ReportTables, stat: str, ylabel: str, title: str) -> Figure | None:
    heads = t.headline.dropna(subset=[stat])
    if heads.empty:
        return None
    datasets = _datasets(heads)
    series = list(dict.fromkeys(heads["series"]))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(datasets) * len(series) ** 0.5 + 3), 4.2))
    ax.grid(alpha=0.3, axis="y")
    position = {dataset: j for j, (dataset, _) in enumerate(datasets)}
    for i, s in enumerate(series):
        rows = heads[heads["series"] == s]
        x = rows["dataset"].map(position).to_numpy() - 0.4 + width * (i + 0.5)
        ax.bar(x, rows[stat].to_numpy(float), width, yerr=_yerr(rows, stat), capsize=3,
               color=_color(s), label=s)  # fmt: skip
        for xi, k in zip(x, rows["k"], strict=True):
            if k:
                ax.annotate(f"K={k}", (xi, 0), ha="center", va="bottom", fontsize=7, color="w")
    ax.set_xticks(range(len(datasets)), [_title(*d) for d in datasets])
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
    datasets = _datasets(heads)
    fig, axes = _panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for _, r in heads[heads["dataset"] == dataset].iterrows():
            one = r.to_frame().T
            ax.errorbar(
                r["output_tokens"],
                r["accuracy"],
                xerr=_yerr(one, "output_tokens"),
                yerr=_yerr(one, "accuracy"),
                fmt="o",
                ms=7,
                capsize=3,
                color=_color(r["series"]),
                label=r["series"],
            )
            ax.annotate(
                r["series"],
                (r["output_tokens"], r["accuracy"]),
                fontsize=8,
                xytext=(5, 5),
                textcoords="offset points",
            )
        ax.set_title(_title(dataset, difficulty))
        ax.set_xlabel("mean output tokens per answer")
        ax.set_xlim(left=0)
    axes[0, 0].set_ylabel("accuracy (fraction correct)")
    axes[0, 0].set_ylim(0, 1.05)
    return _finish(fig, "Accuracy vs answer length (K = 0; 95% CIs): up and left is better")


def _theory_by_config(t: ReportTables) -> dict[tuple, pd.Series]:
    keys = ["sweep_id", "variant", "dataset", "concurrency"]
    return {tuple(r[keys]): r for _, r in t.fits.iterrows()}


def fig_acceptance_vs_k(t: ReportTables) -> Figure | None:
    """4. Acceptance rate and mean acceptance length vs K, with the fitted theory curves."""
    rows = _spec_rows(t.table)
    if rows.empty:
        return None
    datasets = _datasets(rows)
    fits = _theory_by_config(t)
    fig, axes = _panels(len(datasets), rows=2, sharey="row")
    stats = ((0, "acceptance_rate", theory.acceptance_rate),
             (1, "mean_acceptance_length", theory.expected_tokens))  # fmt: skip
    for col, (dataset, difficulty) in enumerate(datasets):
        for series, g in rows[rows["dataset"] == dataset].groupby("series", sort=True):
            g = g.sort_values("k")
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            ks = np.arange(1, g["k"].max() + 1)
            style = {"color": _color(series)}
            for row, stat, curve in stats:
                ax = axes[row, col]
                ax.errorbar(g["k"], g[stat], yerr=_yerr(g, stat), fmt=_marker(series) + "-",
                            capsize=3, label=f"{series} measured", **style)  # fmt: skip
                if fit is not None:
                    ax.plot(ks, curve(fit["alpha"], ks), "--", alpha=0.7,
                            label=f"{series} theory (fitted a)", **style)  # fmt: skip
        axes[0, col].set_title(_title(dataset, difficulty))
        axes[1, col].set_xlabel("K (draft tokens per verify step)")
    axes[0, 0].set_ylabel("acceptance rate\n(accepted / proposed)")
    axes[1, 0].set_ylabel("mean acceptance length\n(tokens per verify step)")
    for ax in axes.flat:
        ax.xaxis.get_major_locator().set_params(integer=True)
    return _finish(fig, "Draft acceptance vs K (95% CIs); dashed: theory with the fitted a "
                   "(values in the fits table)", legend_below=True)  # fmt: skip


def fig_speedup_vs_k(t: ReportTables) -> Figure | None:
    """5. TPOT and e2e speedup vs K, measured with CIs, predicted, best K marked."""
    rows = _spec_rows(t.table).dropna(subset=["speedup_tpot"])
    if rows.empty:
        return None
    datasets = _datasets(rows)
    fits = _theory_by_config(t)
    fig, axes = _panels(len(datasets), rows=2, sharey="row")
    for col, (dataset, difficulty) in enumerate(datasets):
        for series, g in rows[rows["dataset"] == dataset].groupby("series", sort=True):
            g = g.sort_values("k")
            style = {"color": _color(series)}
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            for row, stat in ((0, "speedup_tpot"), (1, "speedup_e2e")):
                ax = axes[row, col]
                err = np.hstack([[[0], [0]], _yerr(g, stat)]).tolist()
                ax.errorbar(np.concatenate([[0], g["k"]]), np.concatenate([[1.0], g[stat]]),
                            yerr=err, fmt=_marker(series) + "-", capsize=3,
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
        axes[0, col].set_title(_title(dataset, difficulty))
        axes[1, col].set_xlabel("K (draft tokens per verify step)")
    axes[0, 0].set_ylabel("TPOT speedup (x, vs K = 0)")
    axes[1, 0].set_ylabel("end-to-end speedup (x, vs K = 0)")
    for ax in axes.flat:
        ax.xaxis.get_major_locator().set_params(integer=True)
    return _finish(
        fig,
        "Speedup vs K (95% CIs); dashed: E/(Kc+1) with the fitted a and c "
        "(values and predicted best K in the fits table)",
        legend_below=True,
    )


def fig_positions(t: ReportTables) -> Figure | None:
    """6. Conditional acceptance per draft position (largest K of each variant)."""
    pos = _lowest_concurrency(t.positions)
    if pos.empty:
        return None
    pos = pos[pos["k"] == pos.groupby(["sweep_id", "variant", "dataset"])["k"].transform("max")]
    datasets = _datasets(pos)
    fits = _theory_by_config(t)
    fig, axes = _panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        for series, g in pos[pos["dataset"] == dataset].groupby("series", sort=True):
            ax.errorbar(
                g["position"],
                g["acceptance"],
                yerr=_yerr(
                    g.rename(columns={"lo": "acceptance_lo", "hi": "acceptance_hi"}), "acceptance"
                ),
                fmt="o-",
                capsize=3,
                color=_color(series),
                label=f"{series} (K={g['k'].iloc[0]})",
            )
            fit = fits.get(tuple(g.iloc[0][["sweep_id", "variant", "dataset", "concurrency"]]))
            if fit is not None:
                ax.axhline(fit["alpha"], color=_color(series), ls="--", alpha=0.6)
        ax.set_title(_title(dataset, difficulty))
        ax.set_xlabel("draft position i")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("P(accept i | 1..i-1 accepted)")
    return _finish(fig, "Per-position conditional acceptance (95% CIs); dashed: fitted a")


def fig_speedup_vs_concurrency(t: ReportTables) -> Figure | None:
    """7. TPOT speedup vs concurrency, where a sweep ran several concurrencies."""
    rows = t.table[(t.table["k"] > 0) & (t.table["draft"] != "none")].dropna(
        subset=["speedup_tpot"]
    )
    n = rows.groupby(["sweep_id", "variant", "dataset", "k"])["concurrency"].transform("nunique")
    rows = rows[n > 1]
    if rows.empty:
        return None
    datasets = _datasets(rows)
    fig, axes = _panels(len(datasets))
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = rows[rows["dataset"] == dataset]
        for (series, k), g in sub.groupby(["series", "k"], sort=True):
            g = g.sort_values("concurrency")
            shade = 0.35 + 0.65 * k / sub["k"].max()
            ax.errorbar(
                g["concurrency"],
                g["speedup_tpot"],
                yerr=_yerr(g, "speedup_tpot"),
                fmt="o-",
                capsize=3,
                color=_color(series),
                alpha=shade,
                label=f"{series} K={k}",
            )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        levels = sorted(sub["concurrency"].unique())
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.set_title(_title(dataset, difficulty))
        ax.set_xlabel("concurrency (requests in flight)")
        ax.legend(fontsize=7, ncol=2)
    axes[0, 0].set_ylabel("TPOT speedup (x, vs K = 0)")
    return _finish(fig, "Speedup vs concurrency (95% CIs): where batching erases the win")


def fig_latency_cdf(t: ReportTables) -> Figure | None:
    """8. End-to-end latency CDFs: each draft variant at its best K vs its K = 0 baseline."""
    heads = t.headline[(t.headline["draft"] != "none") & (t.headline["k"] > 0)]
    if heads.empty:
        return None
    datasets = _datasets(heads)
    fig, axes = _panels(len(datasets))
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
                        color=_color(h["series"]),
                        label=label,
                    )
        ax.set_title(_title(dataset, difficulty))
        ax.set_xlabel("end-to-end latency (s)")
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("fraction of requests")
    return _finish(fig, "Latency CDF: baseline (solid) vs best K (dashed)")


def fig_rejections(t: ReportTables) -> Figure | None:
    """9. Which kinds of tokens the draft is rejected on."""
    rej = t.rejections
    if rej.empty:
        return None
    from reports.rejections import KINDS

    datasets = _datasets(rej)
    fig, axes = _panels(len(datasets))
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
                color=_color(s),
                label=f"{s} ({int(g['count'].sum())} rejections)",
            )
        ax.set_xticks(range(len(KINDS)), KINDS, rotation=30)
        ax.set_title(_title(dataset, difficulty))
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("share of rejected draft positions")
    return _finish(fig, "What the draft gets rejected on (token the target emitted instead)")


# ------------------------------------------------ theory axes (report and simulator)


def draw_expected_tokens(ax: plt.Axes, alphas: tuple[float, ...], k_max: int) -> None:
    """E(a, K) curves over K = 0..k_max, one per a."""
    ks = np.arange(k_max + 1)
    for a, color in zip(
        alphas, plt.get_cmap("Greys")(np.linspace(0.4, 0.9, len(alphas))), strict=True
    ):
        ax.plot(ks, theory.expected_tokens(a, ks), "-", color=color, lw=1.5, label=f"E, a={a}")
    ax.set_xlabel("K (draft tokens per verify step)")
    ax.set_ylabel("tokens per verify step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)


def draw_best_k_map(fig: Figure, ax: plt.Axes) -> None:
    """Heat map of the analytical best K over (a, c)."""
    a, c = np.meshgrid(MAP_ALPHAS, MAP_COSTS)
    best = theory.best_k(a, c)
    norm = BoundaryNorm(np.arange(-0.5, theory.K_MAX + 1.5), 256)
    mesh = ax.pcolormesh(a, c, best, cmap="viridis", norm=norm, shading="auto")
    fig.colorbar(
        mesh,
        ax=ax,
        label=f"best K (0 = do not draft; capped at {theory.K_MAX})",
        ticks=range(0, theory.K_MAX + 1, 2),
    )
    ax.set_yscale("log")
    ax.set_xlabel("a (per-token acceptance)")
    ax.set_ylabel("c (draft cost / target cost per forward)")


def draw_speedup_vs_cost(
    ax: plt.Axes, a: float, ks: list[int], c_max: float = 1.0
) -> dict[int, tuple]:
    """E(a, K)/(Kc+1) against c in [0, c_max] for each K, break-even c (speedup 1) marked."""
    colors = dict(zip(ks, plt.get_cmap("viridis")(np.linspace(0.05, 0.85, len(ks))), strict=True))
    costs = np.linspace(0.0, c_max, 201)
    for k in ks:
        ax.plot(costs, theory.predicted_speedup(a, k, costs), color=colors[k], label=f"K={k}")
        c_star = theory.break_even_cost(a, k)
        if c_star <= c_max:
            ax.plot(c_star, 1.0, "X", color=colors[k], ms=9, mec="k")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("c (draft cost / target cost per forward)")
    ax.set_ylabel("speedup (x)")
    ax.grid(alpha=0.3)
    return colors


def fig_theory_tokens(t: ReportTables) -> Figure | None:
    """10. Measured tokens per verify step on the analytical E(a, K) curves."""
    rows = _spec_rows(t.table).dropna(subset=["mean_acceptance_length"])
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    draw_expected_tokens(ax, simulate.ALPHAS, int(rows["k"].max()) + 1)
    markers = "osD^vP"
    for i, ((series, dataset), g) in enumerate(rows.groupby(["series", "dataset"], sort=True)):
        ax.errorbar(
            g["k"],
            g["mean_acceptance_length"],
            yerr=_yerr(g, "mean_acceptance_length"),
            fmt=markers[i % len(markers)],
            capsize=3,
            color=_color(series),
            label=f"{series} on {dataset}",
        )
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Measured mean acceptance length on the theory curves E(a, K)")
    fig.tight_layout()
    return fig


def fig_theory_cost(t: ReportTables) -> Figure | None:
    """11. Measured speedups at the fitted cost ratio, on the analytical speedup curves."""
    fits = _lowest_concurrency(t.fits.dropna(subset=["c"]))
    if fits.empty:
        return None
    series, datasets = sorted(set(fits["series"])), _datasets(fits)
    fig, axes = _panels(len(datasets), rows=len(series))
    rows = _spec_rows(t.table)
    for (i, s), (j, (dataset, difficulty)) in product(enumerate(series), enumerate(datasets)):
        ax = axes[i, j]
        f = fits[(fits["series"] == s) & (fits["dataset"] == dataset)]
        if f.empty:
            ax.set_visible(False)
            continue
        fit = f.iloc[0]
        g = aggregate.select(rows, fit, ("sweep_id", "variant", "dataset", "concurrency"))
        c_max = max(1.0, 1.2 * fit["c"])
        colors = draw_speedup_vs_cost(ax, fit["alpha"], sorted(g["k"].unique()), c_max)
        for _, r in g.iterrows():
            ax.errorbar(
                max(fit["c"], 0),
                r["speedup_tpot"],
                yerr=_yerr(r.to_frame().T, "speedup_tpot"),
                fmt="o",
                color=colors[r["k"]],
                mec="k",
                capsize=3,
            )
        ax.set_title(
            f"{s} on {_title(dataset, difficulty)}\na={fit['alpha']:.2f}, "
            f"c={fit['c']:.2f} (fitted at K={fit['c_from_k']})",
            fontsize=10,
        )
        ax.legend(fontsize=7)
    return _finish(
        fig, "Measured TPOT speedup (points, 95% CIs) on E/(Kc+1) at the fitted a; X: break-even c"
    )


def fig_theory_best_k(t: ReportTables) -> Figure | None:
    """12. Measured (a, c) of each draft variant on the best-K map."""
    fits = t.fits.dropna(subset=["c", "alpha"])
    if fits.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5 + 0.18 * len(fits)))
    draw_best_k_map(fig, ax)
    markers = dict(zip([d for d, _ in _datasets(fits)], "osD^vP<>", strict=False))
    for _, f in fits.iterrows():
        c = float(np.clip(f["c"], MAP_COSTS[0], MAP_COSTS[-1]))
        ax.plot(
            f["alpha"],
            c,
            markers.get(f["dataset"], "o"),
            color=_color(f["series"]),
            mec="w",
            ms=9,
            label=f"{f['series']} on {f['dataset']}, concurrency "
            f"{f['concurrency']}: K*={f['best_k_measured']} (predicted {f['best_k_predicted']})",
        )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax.set_title("Best K over (a, c); points: measured a, fitted c (K* = measured best K)")
    fig.tight_layout()
    return fig


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
        "Measured TPOT speedup at the fitted cost ratio c against the "
        "analytical speedup curves; the K used to fit c sits on its curve by construction.",
        fig_theory_cost,
        "no speculative run with a baseline to fit c",
    ),
    (
        "theory_best_k",
        "Each draft variant's measured a and fitted c on the analytical best-K "
        "map, with its measured and predicted best K.",
        fig_theory_best_k,
        "no speculative run with a baseline to fit c",
    ),
)


def _save(fig: Figure | None, out: Path, name: str, caption: str, note: str) -> Shown:
    if fig is None:
        return Shown(name, caption, None, note)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return Shown(name, caption, path)


def render_report(t: ReportTables, out: Path) -> list[Shown]:
    """Draw every report figure into ``out``; absent data gives a skipped entry."""
    if t.table.empty:
        return [Shown(name, caption, None, "no runs") for name, caption, _, _ in REPORT_FIGURES]
    return [_save(fn(t), out, name, caption, note) for name, caption, fn, note in REPORT_FIGURES]


# ------------------------------------------------------------ simulator figures


def fig_sim_tokens(sim: simulate.Simulation) -> Figure:
    """Simulated tokens per verify step (points, 95% error bars) over E(a, K)."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    tok = sim.tokens[sim.tokens["k"] > 0]
    draw_expected_tokens(ax, simulate.ALPHAS, int(tok["k"].max()))
    for a, g in tok.groupby("a"):
        ax.errorbar(
            g["k"],
            g["simulated"],
            yerr=1.96 * g["se"],
            fmt="o",
            ms=4,
            capsize=2,
            color="C3",
            label="simulated" if a == tok["a"].min() else None,
        )
    ax.legend(fontsize=8)
    ax.set_title("Tokens per verify step: Monte Carlo (points) vs (1 - a^(K+1)) / (1 - a)")
    fig.tight_layout()
    return fig


def fig_sim_cost(sim: simulate.Simulation) -> Figure:
    """Speedup vs c for several K, one panel per a, simulated points, break-even marked."""
    fig, axes = _panels(2, rows=(len(simulate.ALPHAS) + 1) // 2)
    ks = [1, *simulate.KS]
    for ax, a in zip(axes.flat, simulate.ALPHAS, strict=False):
        colors = draw_speedup_vs_cost(ax, a, ks)
        pts = sim.speedups[(sim.speedups["a"] == a) & sim.speedups["k"].isin(ks)]
        for k, g in pts.groupby("k"):
            ax.errorbar(
                g["c"], g["simulated"], yerr=1.96 * g["se"], fmt="o", ms=4, color=colors[k], mec="k"
            )
        ax.set_title(f"a = {a}")
        ax.legend(fontsize=8)
    return _finish(
        fig,
        "Speedup E/(Kc+1) vs draft cost ratio c (points: simulated; "
        "X: break-even c, where drafting stops paying)",
    )


def fig_sim_best_k(sim: simulate.Simulation) -> Figure:
    """The analytical best-K map with the simulated best K written on the check grid."""
    fig, ax = plt.subplots(figsize=(8, 5.5))
    draw_best_k_map(fig, ax)
    cells = sim.best_k[["a", "c", "best_k_simulated", "best_k_analytical"]]
    for a, c, k_sim, k_true in cells.itertuples(index=False):
        box = None if k_sim == k_true else {"boxstyle": "round,pad=0.15", "fc": "red", "ec": "w"}
        ax.annotate(
            str(int(k_sim)), (a, c), ha="center", va="center", fontsize=8, color="w",
            weight="bold", bbox=box,
        )  # fmt: skip
    ax.set_title("Best K over (a, c): colour analytical, numbers simulated (red box: differ)")
    fig.tight_layout()
    return fig


SIM_FIGURES = (
    (
        "sim_tokens_per_step",
        "Simulated mean tokens per verify step (95% error bars) against the analytical E(a, K).",
        fig_sim_tokens,
    ),
    (
        "sim_speedup_vs_cost",
        "Speedup against the draft/target cost ratio c for K = 1, 3, 5, 7; X "
        "marks the break-even c where speedup = 1.",
        fig_sim_cost,
    ),
    (
        "sim_best_k",
        "Best K over (a, c): analytical colours, simulated argmax as numbers.",
        fig_sim_best_k,
    ),
)


def render_simulation(sim: simulate.Simulation, out: Path) -> list[Shown]:
    """Draw the simulator's figures into ``out``."""
    return [_save(fn(sim), out, name, caption, "") for name, caption, fn in SIM_FIGURES]
