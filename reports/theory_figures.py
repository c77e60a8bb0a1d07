"""Figures on the analytical model's axes: tokens per verify step vs K, speedup vs the
draft cost ratio c, and the best-K map over (a, c). The simulator draws them with its
Monte Carlo points; the report draws them with each draft variant's measurements.
"""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm
from matplotlib.figure import Figure

from reports import plotting, simulate, theory
from reports.plotting import Shown

if TYPE_CHECKING:
    from reports.simulate import Simulation
    from reports.tables import ReportTables

MAP_ALPHAS = np.linspace(0.4, 0.98, 117)
MAP_COSTS = np.geomspace(0.005, 1.0, 121)


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
    rows = plotting.spec_rows(t.table).dropna(subset=["mean_acceptance_length"])
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    draw_expected_tokens(ax, simulate.ALPHAS, int(rows["k"].max()) + 1)
    markers = "osD^vP"
    for i, ((series, dataset), g) in enumerate(rows.groupby(["series", "dataset"], sort=True)):
        ax.errorbar(
            g["k"],
            g["mean_acceptance_length"],
            yerr=plotting.yerr(g, "mean_acceptance_length"),
            fmt=markers[i % len(markers)],
            capsize=3,
            color=plotting.color(series),
            label=f"{series} on {dataset}",
        )
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Measured mean acceptance length on the theory curves E(a, K)")
    fig.tight_layout()
    return fig


def fig_theory_cost(t: ReportTables) -> Figure | None:
    """11. Measured TPOT speedup vs K beside the cost model, the simple model and the
    pre-flight estimate."""
    rows = plotting.spec_rows(t.table).dropna(subset=["speedup_tpot_predicted"])
    if rows.empty:
        return None
    series, datasets = sorted(set(rows["series"])), plotting.datasets(rows)
    fig, axes = plotting.panels(len(datasets), rows=len(series))
    models = (("speedup_tpot_predicted", "s--", "E T_target / T_step (calibrated)"),
              ("speedup_tpot_predicted_simple", "^:", "E / (Kc+1), c measured"),
              ("speedup_tpot_preflight", "x-.", "pre-flight acceptance, calibrated"))  # fmt: skip
    for (i, s), (j, (dataset, difficulty)) in product(enumerate(series), enumerate(datasets)):
        ax = axes[i, j]
        g = rows[(rows["series"] == s) & (rows["dataset"] == dataset)].sort_values("k")
        if g.empty:
            ax.set_visible(False)
            continue
        ax.errorbar(g["k"], g["speedup_tpot"], yerr=plotting.yerr(g, "speedup_tpot"), fmt="o",
                    color="k", capsize=3, label="measured (95% CI)")  # fmt: skip
        for (column, fmt, label), color in zip(models, ("C0", "C1", "C2"), strict=True):
            if g[column].notna().any():
                ax.plot(g["k"], g[column], fmt, color=color, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_title(f"{s} on {plotting.title(dataset, difficulty)}", fontsize=10)
        ax.set_xlabel("K (draft tokens per verify step)")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0, 0].set_ylabel("TPOT speedup (x, vs K = 0)")
    return plotting.finish(
        fig, "Measured TPOT speedup vs the cost model and the simple model E/(Kc+1)",
        legend_below=True,
    )  # fmt: skip


def fig_theory_best_k(t: ReportTables) -> Figure | None:
    """12. Measured (a, c) of each draft variant on the best-K map."""
    fits = t.fits.dropna(subset=["c", "alpha"])
    if fits.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5 + 0.18 * len(fits)))
    draw_best_k_map(fig, ax)
    markers = dict(zip([d for d, _ in plotting.datasets(fits)], "osD^vP<>", strict=False))
    for _, f in fits.iterrows():
        c = float(np.clip(f["c"], MAP_COSTS[0], MAP_COSTS[-1]))
        ax.plot(
            f["alpha"],
            c,
            markers.get(f["dataset"], "o"),
            color=plotting.color(f["series"]),
            mec="w",
            ms=9,
            label=f"{f['series']} on {f['dataset']}, concurrency "
            f"{f['concurrency']}: K*={f['best_k_measured']} (predicted {f['best_k_predicted']})",
        )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax.set_title("Best K of E/(Kc+1) over (a, c); points: measured a and c (K* = measured best K)")
    fig.tight_layout()
    return fig


def fig_sim_tokens(sim: Simulation) -> Figure:
    """Simulated tokens per verify step (points, 95% error bars) over E(a, K)."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    tok = sim.tokens[sim.tokens["k"] > 0]
    draw_expected_tokens(ax, sim.alphas, int(tok["k"].max()))
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


def fig_sim_cost(sim: Simulation) -> Figure:
    """Speedup vs c for several K, one panel per a, simulated points, break-even marked."""
    fig, axes = plotting.panels(2, rows=(len(sim.alphas) + 1) // 2)
    ks = [1, *sim.ks]
    for ax, a in zip(axes.flat, sim.alphas, strict=False):
        colors = draw_speedup_vs_cost(ax, a, ks)
        pts = sim.speedups[(sim.speedups["a"] == a) & sim.speedups["k"].isin(ks)]
        for k, g in pts.groupby("k"):
            ax.errorbar(
                g["c"], g["simulated"], yerr=1.96 * g["se"], fmt="o", ms=4, color=colors[k], mec="k"
            )
        ax.set_title(f"a = {a}")
        ax.legend(fontsize=8)
    return plotting.finish(
        fig,
        "Speedup E/(Kc+1) vs draft cost ratio c (points: simulated; "
        "X: break-even c, where drafting stops paying)",
    )


def fig_sim_best_k(sim: Simulation) -> Figure:
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


def render_simulation(sim: Simulation, out: Path) -> list[Shown]:
    """Draw the simulator's figures into ``out``."""
    return [plotting.save(fn(sim), out, name, caption, "") for name, caption, fn in SIM_FIGURES]
