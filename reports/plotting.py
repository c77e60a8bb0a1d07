"""Shared plotting helpers for the report's and the simulator's figures (Agg backend).

Style (a colour per variant, a marker (a bar's hatch) per sweep, a line style per number
of engine instances, panel sizes, constrained layout), panels wrapped into at most three columns,
integer K axes, CI error bars, a title and one legend beside the panels, and saving a
figure or recording why it was skipped.
"""

from __future__ import annotations

import textwrap
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, MaxNLocator

from reports import aggregate
from reports.load import natural

if TYPE_CHECKING:
    from reports.tables import ReportTables

DPI = 110
PANEL = (4.6, 3.6)  # inches per subplot
MARGIN = 0.3  # inches of room beside a legend and a title
COLS = 3  # panels per row at most
K_LABEL = "K (draft tokens per verify step)"
# every shipped variant its own colour (conf/variant/); a speculator family's CoT variant
# in a dark shade, its CoD variant in a light one
COLORS = {"base": "#7f7f7f", "cot": "#4c8bd6", "cod": "#f28e2b", "cot_sd": "#0b3d91",
          "cod_sd": "#b3470f", "cot_eagle3": "#6a3d9a", "cod_eagle3": "#b294c7",
          "cot_ngram": "#33a02c", "cod_ngram": "#98d176", "cot_suffix": "#c2185b",
          "cod_suffix": "#f48fb1", "base_cot": "#17becf", "base_cod": "#bcbd22",
          "base_cot_ngram": "#006d6f", "base_cod_ngram": "#6b6b00",
          "base_cot_suffix": "#880e4f", "base_cod_suffix": "#ad1457"}  # fmt: skip
PALETTE = plt.get_cmap("tab10").colors
MARKERS = "osD^vP<>"  # one per sweep of a figure, in order
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")  # a bar's, one per sweep, as MARKERS
LINES = ("-", ":", "-.")  # one per value of engine instances ("--" is the theory's)
FILLS = ("full", "none", "bottom")  # a marker's, one per value of engine instances, as LINES


@dataclass(frozen=True)
class Shown:
    """A figure: its file (None when skipped), its caption, and the reason it was skipped."""

    name: str
    caption: str
    path: Path | None
    note: str = ""


def color(series: str) -> str:
    """The variant's colour (a series may carry a ``sweep/`` prefix)."""
    variant = series.rsplit("/", 1)[-1]
    return COLORS.get(variant, PALETTE[zlib.crc32(variant.encode()) % len(PALETTE)])


def panels(
    n: int, stats: int = 1, sharey: bool | str = True, cols: int = COLS
) -> tuple[Figure, np.ndarray]:
    """``n`` panels of ``stats`` stacked axes each, wrapped into rows of at most ``cols``
    panels: ``axes[s, i]`` is stat ``s`` of panel ``i``."""
    ncols = min(n, cols)
    wraps = -(-n // ncols)
    size = (max(PANEL[0] * ncols, 6.0), PANEL[1] * stats * wraps)
    fig, grid = plt.subplots(
        wraps * stats, ncols, figsize=size, squeeze=False, sharey=sharey, layout="constrained"
    )
    for ax in grid.flat:
        ax.grid(alpha=0.3)
    for i in range(n, wraps * ncols):
        for s in range(stats):
            grid[(wraps - 1) * stats + s, i % ncols].set_visible(False)
    axes = [[grid[i // ncols * stats + s, i % ncols] for i in range(n)] for s in range(stats)]
    return fig, np.array(axes)


def ylabel(axes: np.ndarray, text: str) -> None:
    """``text`` on the first panel of each row of ``axes``."""
    for ax in axes:
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(text)


def k_axis(ax: Axes, ks: Iterable[int], label: str | None = K_LABEL) -> None:
    """Integer ticks at the Ks drawn (a few of them when many), limits half a step beyond."""
    ks = sorted({int(k) for k in ks})
    half = min(np.diff(ks), default=1) / 2
    ax.set_xlim(ks[0] - half, ks[-1] + half)
    ax.xaxis.set_major_locator(FixedLocator(ks) if len(ks) <= 12 else MaxNLocator(integer=True))
    if label:
        ax.set_xlabel(label)


def datasets(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(dataset, difficulty) pairs in ``df``, easy to hard."""
    pairs = df[["dataset", "difficulty"]].drop_duplicates()
    order = pairs["difficulty"].map(aggregate.DIFFICULTY_ORDER).fillna(9)
    return list(pairs.assign(o=order).sort_values(["o", "dataset"])[["dataset", "difficulty"]]
                .itertuples(index=False, name=None))  # fmt: skip


def title(dataset: str, difficulty: str) -> str:
    """A panel title."""
    return f"{dataset} ({difficulty})"


def yerr(df: pd.DataFrame, stat: str) -> list[list[float]]:
    """(2, n) distances from each value down to its CI's low end and up to its high end
    (nested lists: matplotlib warns on a (2, 1) array)."""
    value, lo, hi = (df[c].to_numpy(float) for c in (stat, f"{stat}_lo", f"{stat}_hi"))
    return np.abs(np.vstack([value - lo, hi - value])).tolist()


def key(**style: object) -> Line2D:
    """A black legend entry for a line or marker style (what dashed, a star, ... mean)."""
    return Line2D([], [], color="k", **style)


def finish(fig: Figure, title: str, keys: Mapping[str, Artist] | None = None) -> Figure:
    """The title over the panels (centred on them, wrapped to the figure's width) and one
    legend beside them (each label once, then ``keys``), the figure widened by the
    legend's width; measured at the saved resolution, so neither reaches past the
    figure's edge."""
    fig.set_dpi(DPI)
    renderer = fig.canvas.get_renderer()
    entries: dict[str, Artist] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    entries.update(keys or {})
    width = fig.get_figwidth()
    if entries:
        ncol = -(-len(entries) // int(fig.get_figheight() * 5))  # ~5 entries per inch
        legend = fig.legend(entries.values(), entries.keys(), loc="outside right upper",
                            fontsize=8, frameon=False, ncol=ncol, borderpad=1.2)  # fmt: skip
        extent = legend.get_window_extent(renderer)
        fig.set_figwidth(width + extent.width / fig.dpi + MARGIN)
    else:  # the panels' right edge as far from the figure's as a legend's text would be
        fig.get_layout_engine().set(rect=(0, 0, 1 - MARGIN / 2 / width, 1))
    heading = fig.suptitle(title, x=width / fig.get_figwidth() / 2, fontsize=12)
    room = (width - MARGIN) * fig.dpi
    for chars in range(len(title), 10, -1):  # the fewest lines that fit over the panels
        heading.set_text("\n".join(textwrap.wrap(title, chars)))
        if heading.get_window_extent(renderer).width <= room:
            break
    lines = len(textwrap.wrap(title, chars))
    while chars > 10 and len(textwrap.wrap(title, chars - 1)) == lines:  # of even lengths
        chars -= 1
    heading.set_text("\n".join(textwrap.wrap(title, chars)))
    fig.draw_without_rendering()  # the layout: where the panels are
    boxes = [ax.get_position() for ax in fig.axes if ax.get_visible()]
    middle = (min(b.x0 for b in boxes) + max(b.x1 for b in boxes)) / 2
    half = heading.get_window_extent(renderer).width / 2 / fig.bbox.width
    heading.set_x(float(np.clip(middle, half + 0.01, width / fig.get_figwidth() - half)))
    return fig


def _sweep_of(series: str, sweeps: Sequence[str]) -> int | None:
    """The place of a series' sweep among a figure's ``sweeps`` (None without a prefix)."""
    sweep = series.rsplit("/", 1)[0] if "/" in series else ""
    return list(sweeps).index(sweep) if sweep in sweeps else None


def marker(series: str, sweeps: Sequence[str]) -> str:
    """The marker of a series' sweep: the i-th of :data:`MARKERS` for the i-th of a
    figure's ``sweeps`` (a circle for a series without a sweep prefix)."""
    i = _sweep_of(series, sweeps)
    return "o" if i is None else MARKERS[i % len(MARKERS)]


def bar_style(series: str, sweeps: Sequence[str]) -> dict[str, Any]:
    """A bar's colour (the variant's) and hatch (the i-th of :data:`HATCHES` for the i-th
    of a figure's ``sweeps``): bars of one variant in several sweeps told apart."""
    i = _sweep_of(series, sweeps)
    hatch = "" if i is None else HATCHES[i % len(HATCHES)]
    return {"color": color(series), "hatch": hatch, "edgecolor": "w", "linewidth": 0}


def sweeps(df: pd.DataFrame) -> list[str]:
    """A figure's sweeps, in the order their markers follow: numbers in their names by
    value (a200 before a1000)."""
    return sorted(df["sweep_id"].unique(), key=natural)


def instances(df: pd.DataFrame) -> pd.Series:
    """Each row's engine instances (pairs); 1 where not recorded."""
    return df.get("instances", pd.Series(1, index=df.index)).fillna(1).astype(int)


def traces(
    rows: pd.DataFrame, figure: pd.DataFrame
) -> Iterator[tuple[str, dict[str, Any], pd.DataFrame]]:
    """``rows``' lines, each (label, style, its rows sorted by K), told apart within the
    figure drawn from ``figure``: colour by variant (the speculator), marker by sweep, line
    style and marker fill by engine instances where those vary (then named in the label as
    N; the fill tells them apart where a line has one point)."""
    sweep_list, ns = sweeps(figure), sorted(instances(figure).unique())
    grouped = rows.assign(_n=instances(rows)).groupby(["series", "_n"], sort=True)
    for (series, n), g in grouped:
        label = f"{series}, N={n}" if len(ns) > 1 else series
        i = ns.index(n)
        style = {"color": color(series), "marker": marker(series, sweep_list),
                 "ls": LINES[i % len(LINES)], "fillstyle": FILLS[i % len(FILLS)]}  # fmt: skip
        yield label, style, g.sort_values("k") if "k" in g else g


def dodge(i: int, n: int, step: float = 0.08) -> float:
    """The x offset of the ``i``-th of ``n`` series drawn at the same Ks, so none hides
    another."""
    return (i - (n - 1) / 2) * step


def lowest_concurrency(df: pd.DataFrame) -> pd.DataFrame:
    """The rows at the lowest concurrency of each (sweep, variant, dataset)."""
    keys = ["sweep_id", "variant", "dataset"]
    return df[df["concurrency"] == df.groupby(keys)["concurrency"].transform("min")]


def spec_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Speculative groups (a draft, K > 0) at their lowest concurrency."""
    return lowest_concurrency(table[(table["k"] > 0) & (table["draft"] != "none")])


def theory_by_config(t: ReportTables) -> dict[tuple, pd.Series]:
    """Fitted (a, c) rows by (sweep, variant, dataset, concurrency)."""
    keys = ["sweep_id", "variant", "dataset", "concurrency"]
    return {tuple(r[keys]): r for _, r in t.fits.iterrows()}


def save(fig: Figure | str | None, out: Path, name: str, caption: str, note: str) -> Shown:
    """Write ``fig`` to ``out/<name>.png``; None records the figure as skipped for
    ``note``, a string as skipped for the reason it says."""
    if fig is None or isinstance(fig, str):
        return Shown(name, caption, None, fig or note)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return Shown(name, caption, path)
