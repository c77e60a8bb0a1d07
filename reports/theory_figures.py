"""Figures on the analytical model's axes: tokens per verify step vs K, speedup vs the
draft cost ratio c, and the best-K map over (a, c). The simulator draws them with its
Monte Carlo points; the report draws them with each draft variant's measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import BoundaryNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

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
    plotting.k_axis(ax, ks)
    ax.set_ylabel("tokens per verify step")
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
    return colors


def fig_theory_tokens(t: ReportTables) -> Figure | None:
    """Measured tokens per verify step on the analytical E(a, K) curves."""
    rows = plotting.spec_rows(t.table).dropna(subset=["mean_acceptance_length"])
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5), layout="constrained")
    draw_expected_tokens(ax, simulate.ALPHAS, int(rows["k"].max()) + 1)
    datasets = [d for d, _ in plotting.datasets(rows)]
    lines = []
    for j, dataset in enumerate(datasets):  # a marker per dataset where several share the axes
        shape = {"marker": plotting.MARKERS[j % len(plotting.MARKERS)]} if len(datasets) > 1 else {}
        lines += [(f"{label} on {dataset}", {**style, **shape, "ls": "none"}, g)
                  for label, style, g in plotting.traces(rows[rows["dataset"] == dataset], rows)]  # fmt: skip
    for i, (label, style, g) in enumerate(lines):
        ax.errorbar(g["k"] + plotting.dodge(i, len(lines), 0.04), g["mean_acceptance_length"],
                    yerr=plotting.yerr(g, "mean_acceptance_length"), capsize=3, label=label,
                    **style)  # fmt: skip
    return plotting.finish(fig, "Measured mean acceptance length on the theory curves E(a, K)")


# (column, line style, legend entry, what the title calls it)
COST_MODELS = (
    ("speedup_tpot_predicted", {"marker": "s", "ls": "--"}, "E T_target / T_step (calibrated)",
     "the cost model"),
    ("speedup_tpot_predicted_simple", {"marker": "^", "ls": ":"}, "E / (Kc+1), c measured",
     "the simple model E/(Kc+1)"),
    ("speedup_tpot_preflight", {"marker": "x", "ls": "-."}, "pre-flight acceptance, calibrated",
     "the pre-flight estimate"),
)  # fmt: skip


def fig_theory_cost(t: ReportTables) -> Figure | None:
    """Measured TPOT speedup vs K beside the cost model, the simple model and the
    pre-flight estimate: one panel per dataset, a colour per series."""
    rows = plotting.spec_rows(t.table).dropna(subset=["speedup_tpot_predicted"])
    if rows.empty:
        return None
    datasets = plotting.datasets(rows)
    fig, axes = plotting.panels(len(datasets))
    keys: dict[str, Line2D] = {}
    names: list[str] = []
    for ax, (dataset, difficulty) in zip(axes[0], datasets, strict=True):
        sub = rows[rows["dataset"] == dataset]
        for series, mine, g in plotting.traces(sub, rows):
            color = mine["color"]
            ax.errorbar(g["k"], g["speedup_tpot"], yerr=plotting.yerr(g, "speedup_tpot"),
                        fmt=mine["marker"], fillstyle=mine["fillstyle"], ms=7, color=color, capsize=3,
                        label=f"{series} measured (95% CI)")  # fmt: skip
            for column, style, label, name in COST_MODELS:
                if g[column].notna().any():
                    ax.plot(g["k"], g[column], color=color, alpha=0.8, **style)
                    keys[label] = plotting.key(**style)
                    names += [name] if name not in names else []
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_title(plotting.title(dataset, difficulty))
        plotting.k_axis(ax, sub["k"])
    plotting.ylabel(axes[0], "TPOT speedup (x, vs K = 0)")
    return plotting.finish(fig, f"Measured TPOT speedup vs {' and '.join(names)}", keys)


def fig_theory_best_k(t: ReportTables) -> Figure | None:
    """Measured (a, c) of each draft variant on the best-K map."""
    fits = t.fits.dropna(subset=["c", "alpha"])
    if fits.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, max(5.5, 1 + 0.2 * len(fits))), layout="constrained")
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
    return plotting.finish(
        fig, "Best K of E/(Kc+1) over (a, c); points: measured a and c (K* = measured best K)"
    )


def fig_sim_tokens(sim: Simulation) -> Figure:
    """Simulated tokens per verify step (points, 95% error bars) over E(a, K)."""
    fig, ax = plt.subplots(figsize=(7, 4.8), layout="constrained")
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
    return plotting.finish(
        fig, "Tokens per verify step: Monte Carlo (points) vs (1 - a^(K+1)) / (1 - a)"
    )


def fig_sim_cost(sim: Simulation) -> Figure:
    """Speedup vs c for several K, one panel per a, simulated points, break-even marked."""
    fig, axes = plotting.panels(len(sim.alphas), cols=2)
    ks = [1, *sim.ks]
    for ax, a in zip(axes[0], sim.alphas, strict=True):
        colors = draw_speedup_vs_cost(ax, a, ks)
        pts = sim.speedups[(sim.speedups["a"] == a) & sim.speedups["k"].isin(ks)]
        for k, g in pts.groupby("k"):
            ax.errorbar(
                g["c"], g["simulated"], yerr=1.96 * g["se"], fmt="o", ms=4, color=colors[k], mec="k"
            )
        ax.set_title(f"a = {a}")
    plotting.ylabel(axes[0], "speedup (x)")
    keys = {"simulated (95% CI)": plotting.key(marker="o", ls="", ms=4),
            "break-even c": plotting.key(marker="X", ls="", ms=9)}  # fmt: skip
    return plotting.finish(
        fig,
        "Speedup E/(Kc+1) vs draft cost ratio c (points: simulated; "
        "X: break-even c, where drafting stops paying)",
        keys,
    )


def fig_sim_best_k(sim: Simulation) -> Figure:
    """The analytical best-K map with the simulated best K written on the check grid."""
    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    draw_best_k_map(fig, ax)
    cells = sim.best_k[["a", "c", "best_k_simulated", "best_k_analytical"]]
    for a, c, k_sim, k_true in cells.itertuples(index=False):
        box = None if k_sim == k_true else {"boxstyle": "round,pad=0.15", "fc": "red", "ec": "w"}
        ax.annotate(
            str(int(k_sim)), (a, c), ha="center", va="center", fontsize=8, color="w",
            weight="bold", bbox=box,
        )  # fmt: skip
    return plotting.finish(
        fig, "Best K over (a, c): colour analytical, numbers simulated (red box: differ)"
    )


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
