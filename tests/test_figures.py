"""The figures' shared style and the forest plot, on small synthetic sweeps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from reports import figures, load, plotting, tables
from reports.report import make_report
from tests import run_fixtures

ROOT = Path(__file__).resolve().parent.parent
V = {x.name: x for x in run_fixtures.SEED_STUDY}


def _sweep(root, pairing: str, sweeps: tuple[str, ...] = ()) -> tables.ReportTables:
    """cot at K = 0 and cot_sd at K = 1 and 3 on one dataset, 20 problems, rejection
    tokens recorded; in one sweep named for its pairing, or in each of ``sweeps``."""
    for sweep in sweeps or (pairing,):
        for name, k in (("cot", 0), ("cot_sd", 1), ("cot_sd", 3)):
            job = run_fixtures.Job(sweep, V[name], "synth_easy", "easy", k, n_problems=20,
                                   pairing=pairing, detailed=True)  # fmt: skip
            run_fixtures.write_job(root, job)
    return tables.build_tables(load.load(root), n_boot=50)


# each made once for the file: the figures read their tables and change none
@pytest.fixture(scope="module")
def interleaved(tmp_path_factory) -> tuple[Path, tables.ReportTables]:
    """An interleaved :func:`_sweep`: its results folder and its tables."""
    root = tmp_path_factory.mktemp("interleaved")
    return root, _sweep(root, "interleaved")


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> tables.ReportTables:
    return _sweep(tmp_path_factory.mktemp("sequential"), "sequential")


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory) -> tables.ReportTables:
    return _sweep(tmp_path_factory.mktemp("two_sweeps"), "interleaved", sweeps=("a", "b"))


@pytest.mark.usefixtures("unrasterized")
def test_forest_has_a_row_per_comparison_over_the_aa_band_and_leads_the_report(
    interleaved, tmp_path
):
    root, t = interleaved
    (aa,) = t.table[t.table["k"] == 0].itertuples()  # the A/A check: K = 0, interleaved
    ax = figures.fig_forest(t).axes[0]
    points = [x for c in ax.containers for x in c.lines[0].get_xdata()]
    assert sorted(points) == sorted(t.table["speedup_tpot"])  # the A/A check is a row too
    assert [label.get_text() for label in ax.get_yticklabels()] == [
        "A/A: cot, synth_easy",
        "cot_sd, synth_easy, K=1",
        "cot_sd, synth_easy, K=3",
    ]
    (band,) = ax.patches
    assert band.get_x() == pytest.approx(aa.speedup_tpot_lo)
    assert band.get_x() + band.get_width() == pytest.approx(aa.speedup_tpot_hi)
    assert (band.get_y(), band.get_height()) == (-0.5, 3.0)  # behind every row
    plt.close("all")
    text = make_report(root, tmp_path / "out", n_boot=50).read_text()
    opening = text.split("## Flagged runs", 1)[0]  # the summary line, then the forest plot
    first = opening.split("configurations; 0 run directories skipped.\n\n", 1)[1].splitlines()
    assert first[0] == "**1. speedup forest**" and "](figures/speedup_forest.png)" in first[2]
    assert text.split("## Figures\n\n", 1)[1].startswith("**2. ")


@pytest.mark.usefixtures("unrasterized")
def test_forest_orders_sweeps_with_numbers_by_value(tmp_path):
    t = _sweep(tmp_path, "interleaved", sweeps=("a1000", "a200"))
    assert plotting.sweeps(t.table) == ["a200", "a1000"]  # not "a1000" < "a200"
    ax = figures.fig_forest(t).axes[0]
    rows = sorted((y, c.lines[0].get_marker()) for c in ax.containers
                  for y in c.lines[0].get_ydata())  # fmt: skip
    assert [m for _, m in rows] == [plotting.MARKERS[0]] * 3 + [plotting.MARKERS[1]] * 3
    plt.close("all")


def test_without_a_model_or_an_aa_check_titles_say_nothing_of_them(sequential):
    t = sequential  # no calibration: no predicted speedup
    forest = figures.fig_forest(t)
    assert not forest.axes[0].patches and "A/A" not in forest.get_suptitle()
    fig = figures.fig_speedup_vs_k(t)
    assert "dashed" not in fig.get_suptitle()
    assert all(line.get_linestyle() != "--" for ax in fig.axes for line in ax.get_lines())
    fig.canvas.draw()
    (legend,) = fig.legends  # one legend, beside the panels
    right = max(ax.get_window_extent().x1 for ax in fig.axes)
    assert legend.get_window_extent().x0 >= right
    plt.close("all")


@pytest.mark.parametrize(("ks", "ticks", "limits"), [
    ([3], [3], (2.5, 3.5)),
    ([0, 1, 3, 5], [0, 1, 3, 5], (-0.5, 5.5)),
    ([1, 3], [1, 3], (0.0, 4.0)),
])  # fmt: skip
def test_k_axis_ticks_the_ks_drawn_with_half_a_step_beyond(ks, ticks, limits):
    fig, ax = plt.subplots()
    plotting.k_axis(ax, ks)
    assert list(ax.get_xticks()) == ticks and ax.get_xlim() == limits
    plt.close(fig)


def test_panels_wrap_into_at_most_three_columns():
    fig, axes = plotting.panels(5, stats=2)
    assert axes.shape == (2, 5)
    spans = [(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start)
             for ax in axes[1]]  # fmt: skip
    assert spans == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1)]
    assert sum(ax.get_visible() for ax in fig.axes) == 10  # the sixth cell's two are hidden
    plt.close(fig)


def test_every_shipped_variant_has_a_colour_of_its_own():
    variants = sorted(p.stem for p in (ROOT / "conf" / "variant").glob("*.yaml"))
    colours = [plotting.color(v) for v in variants]
    assert len(variants) >= 15 and len(set(colours)) == len(variants)
    assert plotting.color("sweep/cot_suffix") == plotting.color("cot_suffix")


def test_speedup_vs_k_panels_share_the_k_range_the_prediction_reaches(interleaved):
    _, t = interleaved  # measured at K = 0, 1, 3
    fit = t.table[t.table["k"] > 0].iloc[:1][["sweep_id", "variant", "dataset", "concurrency"]]
    t = dataclasses.replace(t, fits=fit.assign(alpha=0.8, c=0.1))  # predicted to K = 5
    fig = figures.fig_speedup_vs_k(t)
    tpot, e2e = fig.axes[:2]
    assert "dashed" in fig.get_suptitle() and tpot.get_xlim() == e2e.get_xlim() == (-0.5, 5.5)
    plt.close("all")


def test_series_of_one_colour_differ_in_marker_by_sweep_and_line_by_instances():
    # a200 and a1000 drew the same marker when it came from a hash of the sweep's name
    rows = pd.DataFrame({"sweep_id": ["a200", "a1000", "a500", "a500"],
                         "series": ["a200/cod_eagle3", "a1000/cod_eagle3", "a500/cod_eagle3",
                                    "a500/cod_eagle3"],
                         "instances": [1, 1, 1, 4], "k": 3})  # fmt: skip
    lines = {label: (style["color"], style["marker"], style["ls"])
             for label, style, _ in plotting.traces(rows, rows)}  # fmt: skip
    purple = plotting.color("cod_eagle3")
    assert lines == {"a200/cod_eagle3, N=1": (purple, "o", "-"),  # sweeps by their numbers
                     "a500/cod_eagle3, N=1": (purple, "s", "-"),
                     "a1000/cod_eagle3, N=1": (purple, "D", "-"),
                     "a500/cod_eagle3, N=4": (purple, "s", ":")}  # fmt: skip


@pytest.mark.usefixtures("unrasterized")
def test_accuracy_zero_everywhere_is_not_drawn_and_the_report_says_why(interleaved, tmp_path):
    _, t = interleaved
    wrong = t.headline.assign(accuracy=0.0, accuracy_lo=0.0, accuracy_hi=0.0)
    t = dataclasses.replace(t, headline=wrong)
    assert figures.fig_accuracy(t) == figures.fig_accuracy_vs_tokens(t) == figures.NOTHING_RIGHT
    shown = {s.name: s for s in figures.render_report(t, tmp_path / "figs")}
    assert shown["accuracy_by_variant"].path is None
    assert shown["accuracy_by_variant"].note == figures.NOTHING_RIGHT
    assert not (tmp_path / "figs" / "accuracy_by_variant.png").exists()
    plt.close("all")


def test_no_figure_draws_past_its_edge_and_legends_keep_a_margin(interleaved, sequential, tmp_path):
    # the forest plot's title ran past its left edge, its legend flush with the right one
    _, t = interleaved
    forest = figures.fig_forest(t)
    forest.canvas.draw()
    (legend,) = forest.legends
    gap = forest.bbox.x1 - max(text.get_window_extent().x1 for text in legend.get_texts())
    assert gap >= 0.1 * forest.dpi and forest.dpi == plotting.DPI  # measured as saved
    plt.close("all")
    shown = [s for s in figures.render_report(t, tmp_path / "figs") if s.path]
    assert {s.name for s in shown} >= {"speedup_forest", "latency_cdf", "rejection_kinds"}
    alone = figures.fig_forest(sequential)  # no A/A: no legend
    shown.append(plotting.save(alone, tmp_path / "seq", "forest without a legend", "", ""))
    for s in shown:
        ink = imread(s.path)[..., :3].min(axis=2) < 0.95
        edges = ink[:3].any() or ink[-3:].any() or ink[:, :3].any() or ink[:, -3:].any()
        assert not edges, f"{s.name} draws to its edge"


def _styles(ax) -> dict[str, tuple]:
    """Each labelled line's (colour, marker, line style) and bar set's (colour, hatch)."""
    lines = {x.get_label(): (x.get_color(), x.get_marker(), x.get_linestyle())
             for x in ax.get_lines()}  # fmt: skip
    bars = {b.get_label(): (tuple(b.patches[0].get_facecolor()), b.patches[0].get_hatch())
            for b in ax.containers if hasattr(b, "patches")}  # fmt: skip
    return {k: v for k, v in {**lines, **bars}.items() if not k.startswith("_")}


def test_latency_cdfs_of_one_variant_in_two_sweeps_are_told_apart(two_sweeps):
    # every series drew in its variant's colour; an interleaved group drew no baseline
    t = two_sweeps
    (ax,) = figures.fig_latency_cdf(t).axes
    styles = _styles(ax)
    assert sorted(styles) == ["a/cot_sd, K=3", "a/cot_sd: baseline (K=0)",
                              "b/cot_sd, K=3", "b/cot_sd: baseline (K=0)"]  # fmt: skip
    assert len(set(styles.values())) == len(styles)
    baseline = next(
        line for line in ax.get_lines() if line.get_label() == "a/cot_sd: baseline (K=0)"
    )
    paired = t.requests[(t.requests["sweep_id"] == "a") & (t.requests["k"] == 3)]["pair_e2e_s"]
    assert np.array_equal(np.unique(baseline.get_xdata()), np.unique(paired))  # its own pairs
    plt.close("all")


@pytest.mark.parametrize("fig", [figures.fig_rejections, figures.fig_output_tokens])
def test_bars_of_one_variant_in_two_sweeps_are_told_apart(two_sweeps, fig):
    # r1/cot_sd, r2/cot_sd and r3/cot_sd were three bars of one colour and nothing else
    t = two_sweeps
    (ax,) = fig(t).axes
    styles = _styles(ax)
    assert {"a/cot_sd", "b/cot_sd"} <= set(styles)
    assert len(set(styles.values())) == len(styles)
    plt.close("all")


def test_speedup_vs_concurrency_draws_a_k_across_the_sweeps_that_ran_its_levels(tmp_path):
    for sweep, levels in (("closed", (1, 4)), ("saturated", (16,))):
        for c in levels:
            for k in (0, 2):
                job = run_fixtures.Job(sweep, V["cot_sd"] if k else V["cot"], "synth_easy",
                                       "easy", k, concurrency=c, n_problems=20, server=True)  # fmt: skip
                run_fixtures.write_job(tmp_path, job, run_fixtures.records(job))
    t = tables.build_tables(load.load(tmp_path), n_boot=50)
    (ax,) = figures.fig_speedup_vs_concurrency(t).axes[:1]
    (bars,) = ax.containers
    assert bars.get_label() == "cot_sd K=2 (closed, saturated)"
    line = bars.lines[0]
    assert np.allclose(line.get_xdata() / 2 ** plotting.dodge(0, 1), [1, 4, 16])
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["1", "4", "16"]
    plt.close("all")
