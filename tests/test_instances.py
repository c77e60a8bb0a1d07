"""A job over several engine instances: fresh pairs in alternating start order, its problems
split over them, and intervals that resample instances, then problems."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import results
from harness.backends import live
from harness.config import ConfigError, compose_config, validate
from harness.sweep import job as jobs
from reports import aggregate, bootstrap, markdown


def test_one_instance_draws_the_one_level_weights_and_two_draw_whole_instances():
    one = bootstrap.weights(12, 200, 0)
    assert np.array_equal(bootstrap.weights(12, 200, 0, (0,) * 12), one)
    labels = np.array([0, 1] * 6)
    w = bootstrap.weights(12, 200, 0, tuple(labels))
    # each replicate draws two instances with replacement, then six problems per copy
    per_instance = np.stack([w[:, labels == i].sum(1) for i in (0, 1)], 1)
    assert set(per_instance.sum(1)) == {12.0}
    assert set(per_instance.ravel()) <= {0.0, 6.0, 12.0}
    assert (per_instance[:, 0] == 0).any() and (per_instance[:, 1] == 0).any()


def test_an_instance_effect_widens_the_interval_only_when_instances_are_resampled():
    rng = np.random.default_rng(1)
    labels = np.arange(40) % 2
    den = np.ones((40, 1))
    num = 1 + 0.01 * rng.standard_normal((40, 1)) + 0.1 * labels[:, None]  # instance 1: +10%
    _, lo1, hi1 = bootstrap.ratio(num, den)
    _, lo2, hi2 = bootstrap.ratio(num, den, instances=tuple(labels))
    assert (hi2 - lo2)[0] > 3 * (hi1 - lo1)[0]
    assert lo2[0] <= 1.01 and hi2[0] >= 1.09  # spans both instances' means


def _requests(spread: float) -> pd.DataFrame:
    """An interleaved K = 2 group of 8 problems over 2 instances: the job's TPOT is 10 ms,
    its pair's 20 ms on instance 0 and 20 ms * (1 + spread) on instance 1."""
    rows = []
    for i in range(8):
        pair = 0.02 * (1 + spread * (i % 2))
        rows.append(dict(
            sweep_id="s", run_id="r", target="t", variant="cot_sd", draft="d",
            prompt_style="cot", dataset="x", difficulty="easy", temperature=0.0, seed=0,
            concurrency=1, backend="offline", request_rate=0.0, pairing="interleaved",
            instances=2, instance=i % 2, k=2, k_schedule="none", synthetic_acceptance_length=0.0,
            problem_id=f"p{i}",
            output_tokens=11, correct=1.0, ttft_s=0.01, e2e_s=0.11, tpot_s=0.01,
            num_spec_steps=5.0, num_draft_tokens=10.0, num_accepted_tokens=5.0,
            acceptance_histogram=[0, 5, 0], pair_ttft_s=0.01, pair_e2e_s=0.01 + 10 * pair,
            pair_tpot_s=pair, pair_output_tokens=11, limit=8, dataset_digest="d",
            target_role="cot",
        ))  # fmt: skip
    return pd.DataFrame(rows)


def test_the_table_shows_each_instances_speedup_spread():
    df = aggregate.with_sums(_requests(0.5))
    (block,) = aggregate.blocks(df, aggregate.GROUP).values()
    assert block.instances == (0, 1) * 4
    row = aggregate._speedups({k: block for k in [tuple(df.loc[0, list(aggregate.GROUP)])]}, {},
                              200, 0).iloc[0]  # fmt: skip
    assert row["instance_spread"] == pytest.approx(0.5)  # 3.0x on instance 1 over 2.0x
    assert row["instance_speedups"] == "2.0000 3.0000"
    assert row["speedup_tpot"] == pytest.approx(2.5)
    assert row["speedup_tpot_lo"] <= 2.05 and row["speedup_tpot_hi"] >= 2.95
    runs = pd.DataFrame([dict(sweep_id="s", run_id="r", instances=2, engine_start_s=30.04,
                              wall_s=5.0)])  # fmt: skip
    section = "\n".join(markdown._instances(pd.DataFrame([row]).assign(series="cot_sd"), runs))
    assert "## Engine instances" in section and "| 2.000 3.000 | 0.500 |" in section
    assert "| s | `r` | 2 | 30.0 | 5.0 |" in section
    assert markdown._instances(pd.DataFrame([row]).assign(instance_speedups=None), runs) == []


def _windowed(pair_window: int | None) -> pd.DataFrame:
    """An interleaved group of 32 problems on 2 instances, in windows of 4 per instance
    whose pair side ran 30% slower in every other window (a slow moment that every
    request of a window shares), with each request's window for ``pair_window`` in its
    run's config."""
    rng = np.random.default_rng(3)
    reqs = pd.concat([_requests(0.0)] * 4, ignore_index=True).sort_values(
        "instance", kind="stable").reset_index(drop=True)  # fmt: skip
    reqs["problem_id"] = [f"p{i:02d}" for i in range(len(reqs))]
    at = reqs.groupby("instance").cumcount().to_numpy()
    slow = np.where((at // 4) % 2, 1.3, 1.0) * (1 + 0.01 * rng.standard_normal(len(reqs)))
    reqs["pair_tpot_s"] = reqs["pair_tpot_s"] * slow
    lists = pd.ArrowDtype(pa.list_(pa.int64()))  # as the loaded request table holds them
    reqs["acceptance_histogram"] = reqs["acceptance_histogram"].astype(lists)
    runs = pd.DataFrame([dict(sweep_id="s", run_id="r", pair_window=pair_window)])
    return reqs.assign(window=aggregate.windows(reqs, runs))


def test_a_slow_moment_a_window_shares_widens_the_speedup_only_when_windows_are_resampled():
    # concurrency 1 and no pair_window: windows of one
    alone, windowed = (aggregate.blocks(aggregate.with_sums(_windowed(w)), aggregate.GROUP)
                       for w in (None, 4))  # fmt: skip
    (block,), (wblock,) = alone.values(), windowed.values()
    assert block.by_window() is block  # every problem alone in its window
    units = wblock.by_window()
    assert len(units.problems) == 8 and units.instances == (0,) * 4 + (1,) * 4
    assert np.allclose(units.values.sum(0), wblock.values.sum(0))  # the same sums, grouped
    a, w = (aggregate._speedups(g, {}, 400, 0).iloc[0] for g in (alone, windowed))
    assert a["speedup_tpot"] == pytest.approx(w["speedup_tpot"])  # the point does not move
    width = {n: r["speedup_tpot_hi"] - r["speedup_tpot_lo"] for n, r in (("a", a), ("w", w))}
    assert width["w"] > 1.5 * width["a"]
    # each end is the wider of the two bootstraps: never inside the one over problems
    assert (
        w["speedup_tpot_lo"] <= a["speedup_tpot_lo"]
        and w["speedup_tpot_hi"] >= a["speedup_tpot_hi"]
    )


def test_the_window_jackknife_of_a_mean_difference_is_the_t_interval_of_the_mean():
    from scipy import stats

    y = np.array([[1.0], [2.0], [3.0], [4.0]])
    ones = np.ones((4, 1))
    lo, hi = bootstrap.jackknife_t((ones, ones), (y, ones), "difference")
    t_lo, t_hi = stats.t.interval(0.95, 3, loc=y.mean() - 1, scale=stats.sem(y[:, 0]))
    assert (lo[0], hi[0]) == pytest.approx((t_lo, t_hi))
    # a ratio on the log scale: symmetric about the point there
    lo, hi = bootstrap.jackknife_t((ones, ones), (y, ones), "ratio")
    assert np.log(hi[0]) - np.log(2.5) == pytest.approx(np.log(2.5) - np.log(lo[0]))
    assert np.isnan(bootstrap.jackknife_t((ones[:1], ones[:1]), (y[:1], ones[:1]), "ratio")[0][0])


def test_a_verdicts_comparison_resamples_the_windows_its_pairs_share():
    y = _windowed(4)
    tpot = aggregate.SPEEDUPS["speedup_tpot"]
    shared = aggregate.contrast(aggregate.pair_side(y), y, tpot, "ratio", 400, 0)
    # the same requests without their windows: a bootstrap over problems (and instances)
    y = y.assign(window=-1)
    alone = aggregate.contrast(aggregate.pair_side(y), y, tpot, "ratio", 400, 0)
    assert shared[0] == pytest.approx(alone[0])
    assert shared[2] - shared[1] > 1.5 * (alone[2] - alone[1])


@pytest.mark.parametrize(
    "overrides, key",
    [(["instances=0"], "instances"), (["limit=3", "instances=4"], "instances"),
     (["instances=2", "backend=server", "server.url=http://127.0.0.1:8000"], "instances")],
)  # fmt: skip
def test_bad_instance_counts_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"^{key}="):
        validate(compose_config(overrides))


def test_the_problems_split_round_robin_and_come_back_in_order():
    class Problem:
        def __init__(self, i):
            self.id = f"p{i}"

    class Request:
        def __init__(self, i):
            self.problem = Problem(i)

    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Job:
        requests: tuple

    job = Job(tuple(Request(i) for i in range(5)))
    parts = jobs.split(job, 2)
    assert [[r.problem.id for r in p.requests] for p in parts] == [["p0", "p2", "p4"], ["p1", "p3"]]


def test_several_instances_start_fresh_in_alternating_order_and_one_reuses():
    started, stopped = [], []

    def start(spec, same, **options):
        started.append(spec)
        return f"{spec}#{len(started)}"

    kind = live.Kind("fake", start, stopped.append)
    try:
        first = live.instance(kind, ("job", "base"), 0, fresh=False)
        assert started == ["base", "job"] and [b for b, _ in first] == ["job#2", "base#1"]
        again = live.instance(kind, ("job", "base"), 0, fresh=False)  # one instance: reused
        assert [r for _, r in again] == [True, True] and len(started) == 2
        fresh = live.instance(kind, ("job", "base"), 0, fresh=True)
        assert sorted(stopped) == ["base#1", "job#2"]
        assert started[2:] == ["base", "job"] and [r for _, r in fresh] == [False, False]
        second = live.instance(kind, ("job", "base"), 1, fresh=True)
        assert started[4:] == ["job", "base"] and [b for b, _ in second] == ["job#5", "base#6"]
        assert len(stopped) == 4
    finally:
        live.clear()


@pytest.mark.slow
def test_a_job_over_two_instance_pairs_on_real_engines(tiny_overrides, tmp_path):
    overrides = [o for o in tiny_overrides if not o.startswith(("pairing=", "limit="))]
    run = subprocess.run(
        [sys.executable, "-m", "harness", "variant=cot_sd", "dataset=synth_easy", "spec.k=2",
         "instances=2", "limit=4", "max_tokens=12", "warmup=0", "calibrate=false", "pairing=interleaved",
         *overrides],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    spec = tmp_path / "results" / "tiny" / "cot_sd-synth_easy-k2-c1-i2-s0-t0-n4"
    rows = pq.read_table(spec / results.REQUESTS).to_pylist()
    assert [r["instance"] for r in rows] == [0, 1, 0, 1]
    assert all(r["instances"] == 2 and r["pair_tpot_s"] is not None for r in rows)
    summary = json.loads((spec / results.SUMMARY).read_text())
    assert summary["engine_launches"] == 4  # a fresh pair for each instance
    assert summary["counter_mismatch"] is None
    # the second instance started its K = 2 engine first: only the first kept its counters
    drafted = sum(r["num_draft_tokens"] for r in rows if r["instance"] == 0)
    assert summary["spec"]["num_draft_tokens"] == drafted > 0
    assert summary["spec_requests"] == 2  # and the summary and the job's line say so
    assert "(vLLM counters of 2 of 4 requests)" in run.stdout + run.stderr


def test_more_instances_than_the_datasets_problems_is_bad_input(tiny_overrides):
    from harness.sweep.runner import prepare

    cfg = compose_config(
        [*tiny_overrides, "variant=cot", "limit=null", "dataset.size=3", "instances=4"]
    )
    with pytest.raises(ConfigError, match=r"^instances=4: more engine instances than the 3 "):
        prepare(cfg)


def test_the_instances_outcomes_combine_in_problem_order_with_their_counts_and_sentinel():
    from types import SimpleNamespace

    from harness.metrics import SpecCounts
    from tests import run_fixtures

    recs = run_fixtures.records(
        run_fixtures.Job("t", run_fixtures.SEED_STUDY[3], "synth_easy", "easy", 2, n_problems=5)
    )
    job = SimpleNamespace(requests=[SimpleNamespace(problem=SimpleNamespace(id=r.problem_id))
                                    for r in recs])  # fmt: skip
    counts = SpecCounts(num_steps=4, num_draft_tokens=8, num_accepted_tokens=5,
                        accepted_per_pos=(3, 2))  # fmt: skip
    parts = [
        jobs.Outcome(recs[0::2], 2.0, counts, recs[0::2], jobs.Started(3.0, False, 2),
                     {"engine": "baseline", "k": 0, "start_s": 1.0, "end_s": 1.2}),
        jobs.Outcome(recs[1::2], 1.0, None, recs[1::2], jobs.Started(4.0, False, 4),
                     {"engine": "baseline", "k": 0, "start_s": 2.0, "end_s": 2.0}),
    ]  # fmt: skip
    out = jobs.combine(job, parts)
    assert [r.problem_id for r in out.records] == [r.problem_id for r in recs]
    assert [r.instance for r in out.records] == [0, 1, 0, 1, 0]
    assert out.wall_s == 3.0 and out.counts == counts and out.counted == recs[0::2]
    assert out.started == jobs.Started(7.0, False, 4)
    # each instance's drift is its own: the mean start and end move by the machine's 6.7%
    assert out.reference["start_s"] == pytest.approx(1.5)
    assert out.reference["end_s"] == pytest.approx(1.6)
