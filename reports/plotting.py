"""Shared plotting helpers for the report's and the simulator's figures (Agg backend).

Style (a colour per variant, a marker per sweep, panel sizes), one panel per dataset,
CI error bars, titles and legends, and saving a figure or recording why it was skipped.
"""

from __future__ import annotations

import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from reports import aggregate

if TYPE_CHECKING:
    from reports.tables import ReportTables

DPI = 110
PANEL = (4.6, 3.6)  # inches per subplot
COLORS = {"base": "#7f7f7f", "cot": "#4c8bd6", "cod": "#f28e2b", "cot_sd": "#0b3d91",
          "cod_sd": "#b3470f"}  # fmt: skip
PALETTE = plt.get_cmap("tab10").colors


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


def panels(n: int, rows: int = 1, sharey: bool = True) -> tuple[Figure, np.ndarray]:
    """A grid of ``rows`` x ``n`` gridded panels."""
    width = max(PANEL[0] * n, 6.0)  # room for the title above a single panel
    fig, axes = plt.subplots(rows, n, figsize=(width, PANEL[1] * rows), squeeze=False,
                             sharey=sharey)  # fmt: skip
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    return fig, axes


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


def finish(fig: Figure, title: str, legend_below: bool = False) -> Figure:
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


def marker(series: str) -> str:
    """One marker per sweep when series carry a sweep prefix."""
    sweep = series.rsplit("/", 1)[0] if "/" in series else ""
    return "osD^vP<>"[zlib.crc32(sweep.encode()) % 8] if sweep else "o"


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


def save(fig: Figure | None, out: Path, name: str, caption: str, note: str) -> Shown:
    """Write ``fig`` to ``out/<name>.png``; None records the figure as skipped for ``note``."""
    if fig is None:
        return Shown(name, caption, None, note)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return Shown(name, caption, path)
