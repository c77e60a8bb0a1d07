"""The K schedule by batch size: its ranges, its recommendation from the cost model's
predictions, its check against the best fixed K, and the schedule in an engine spec; the
server runs whose outputs reached the client in one chunk."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness import results, schedule
from harness import results as harness_results
from harness.backends.engine import EngineSpec
from harness.config import check_command_line, compose_config
from harness.results import job_name
from reports import aggregate, fit, load, markdown, serving, tables
from tests import run_fixtures


@pytest.mark.parametrize(
    ("best", "expected"),
    [
        ({1: 3, 4: 3, 16: 0, 32: 0}, [[1, 8, 3], [9, 32, 0]]),
        ({1: 3, 4: 1, 16: 0, 32: 1}, [[1, 2, 3], [3, 8, 1], [9, 22, 0], [23, 32, 1]]),
        ({1: 0, 4: 0, 16: 0, 32: 0}, [[1, 32, 0]]),
    ],
)
def test_each_levels_k_holds_to_the_geometric_midpoints(best, expected):
    assert schedule.from_levels(sorted(best), best) == expected


def _row(k: int, concurrency: int, predicted: float, measured: float, **extra) -> dict:
    return {"sweep_id": "s", "backend": "server", "variant": "cot_sd", "dataset": "d",
            "limit": 16, "request_rate": 0.0, "k_schedule": "none", "k": k, "concurrency": concurrency,
            "speedup_tpot_predicted": predicted, "speedup_tpot": measured,
            "speedup_tpot_lo": measured - 0.1, "speedup_tpot_hi": measured + 0.1} | extra  # fmt: skip


def test_the_schedule_takes_the_predicted_best_k_and_zero_where_none_pays():
    table = pd.DataFrame([
        _row(1, 1, 1.3, 1.2), _row(3, 1, 1.6, 1.5),   # light load: K = 3
        _row(1, 4, 1.2, 1.25), _row(3, 4, 1.1, 1.0),  # K = 1 (measured agrees)
        _row(1, 16, 0.9, 1.05), _row(3, 16, 0.7, 0.8),  # nothing pays: K = 0 (measured K = 1)
        _row(0, 16, float("nan"), 1.0),               # a baseline row is not a candidate
        _row(3, 8, 2.0, 2.0, request_rate=4.0),       # open loop: not on the batch-size axis
    ])  # fmt: skip
    # suffix decoding drafts only at its own K: it gets no schedule, however its Ks compare
    suffix = table.assign(variant="cot_suffix")
    req = pd.DataFrame({"variant": ["cot_sd", "cot_sd", "cot_suffix"],
                        "method": [None, "draft_model", "suffix"]})  # fmt: skip
    (rec,) = serving.k_schedules(pd.concat([table, suffix]), req).to_dict("records")
    assert rec["schedule"] == "[[1,2,3],[3,8,1],[9,16,0]]"
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=0"
    assert rec["measured"] == "1: K=3, 4: K=1, 16: K=1"
    assert rec["overrides"] == (
        "variant=cot_sd dataset=d spec.k=3 spec.k_schedule=[[1,2,3],[3,8,1],[9,16,0]]"
    )
    assert rec["off"] == "target alone"  # speculation off was not calibrated
    # make serve passes these words to python -m harness: its checks must take them
    overrides = rec["overrides"].replace("dataset=d", "dataset=synth_easy").split()
    assert check_command_line(overrides).spec.k_schedule == [[1, 2, 3], [3, 8, 1], [9, 16, 0]]
    # calibrated, K = 0 keeps paying for the loaded draft: at 16 in flight K = 1 beats it
    off = {1: 0.8, 4: 0.9, 16: 0.6}
    priced = table.assign(speedup_off_predicted=table["concurrency"].map(off))
    (rec,) = serving.k_schedules(priced, req).to_dict("records")
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=1"
    assert rec["schedule"] == "[[1,2,3],[3,16,1]]"
    assert rec["off"] == "1: 0.80x, 4: 0.90x, 16: 0.60x"
    # a level left uncalibrated says so, and its K = 0 counts as the target alone
    partly = table.assign(speedup_off_predicted=table["concurrency"].map({1: 0.8, 4: 0.9}))
    (rec,) = serving.k_schedules(partly, req).to_dict("records")
    assert rec["off"] == "1: 0.80x, 4: 0.90x, 16: target alone"
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=0"
    # the schedule's own runs (a sweep of their own), beside the best fixed K at each
    # concurrency on the same problems; another problem set's faster K is not a match
    ran = [_row(3, c, float("nan"), s, k_schedule="1-2k3_3-8k1_9-16k0", sweep_id="sched")
           for c, s in ((1, 1.45), (16, 1.02))]  # fmt: skip
    other = _row(1, 1, 1.9, 1.9, limit=8)
    checks = serving.schedule_checks(pd.concat([table, pd.DataFrame([*ran, other])]))
    assert checks[["concurrency", "best_fixed_k", "fixed_sweep_id", "fixed_speedup_tpot"]].values.tolist() == [
        [1, 3, "s", 1.5], [16, 1, "s", 1.05],
    ]  # fmt: skip
    assert checks["speedup_tpot"].tolist() == [1.45, 1.02]


def test_a_schedules_k_at_a_batch_size_is_vllms():
    def spec(schedule):
        cfg = compose_config(["variant=cot_sd", "spec.k=3", f"spec.k_schedule={schedule}"])
        return EngineSpec.from_config(cfg)

    gap_and_tail = spec("[[1,4,2],[9,16,3],[17,20,0]]")  # max_num_seqs 32
    assert [gap_and_tail.k_at(b) for b in (1, 4, 5, 8, 9, 16, 17, 20, 21, 32)] == [
        2, 2, 2, 2, 3, 3, 0, 0, 0, 0
    ]  # fmt: skip
    assert EngineSpec.from_config(compose_config(["variant=cot_sd", "spec.k=3"])).k_at(7) == 3


def test_a_k_schedule_reaches_vllm_and_names_the_job():
    cfg = compose_config(["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[1,2,3],[3,32,0]]",
                          "concurrency=4"])  # fmt: skip
    spec = EngineSpec.from_config(cfg)
    speculative = spec.llm_kwargs()["speculative_config"]
    assert speculative["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 32, 0]]
    assert speculative["num_speculative_tokens"] == 3
    assert "num_speculative_tokens_per_batch_size" not in str(EngineSpec.baseline(cfg))
    assert spec != EngineSpec.from_config(compose_config(["variant=cot_sd", "spec.k=3"]))
    assert job_name(cfg) == "cot_sd-synth_easy-k3-c4-ks1-2k3_3-32k0-s0-t0-n30"


def _served(tmp_path, job, pair_window=None, **columns):
    """Write ``job``'s drawn records with ``columns`` set by hand (one value per record)
    and ``pair_window`` in its config; return the directory. Timings set without a TPOT
    get the TPOT they imply (e2e - TTFT over the tokens after the first)."""
    recs = run_fixtures.records(job)
    if "e2e_s" in columns and "tpot_s" not in columns:
        tokens = columns.get("output_tokens", [r.output_tokens for r in recs])
        columns["tpot_s"] = [(e - t) / (n - 1) for e, t, n in
                             zip(columns["e2e_s"], columns["ttft_s"], tokens, strict=True)]  # fmt: skip
    recs = run_fixtures.with_columns(recs, **columns)
    summary = run_fixtures.summary(job, recs)
    summary = dataclasses.replace(summary, config={**summary.config, "pair_window": pair_window})
    out = tmp_path / job.sweep / job.name
    results.write_job(out, recs, summary)
    return out


def test_a_requests_batch_size_is_the_mean_number_in_decode_over_its_decode():
    # two decodes overlapping half of each: 1.5 each; a third alone; one with no decode
    start, end = np.array([0.0, 1.0, 5.0, 7.0]), np.array([2.0, 3.0, 6.0, 7.0])
    assert serving.in_decode(start, end)[:3].tolist() == [1.5, 1.5, 1.0]
    assert np.isnan(serving.in_decode(start, end)[3])


def test_batch_sizes_restart_at_each_window_and_read_the_pairs_own_send_times(tmp_path):
    V = {v.name: v for v in run_fixtures.SEED_STUDY}
    job = run_fixtures.Job("s", V["cot_sd"], "synth_easy", "easy", 2, concurrency=4,
                           n_problems=4, pairing="interleaved", request_rate=1.0)  # fmt: skip
    # windows of 2 (pair_window; not the concurrency, 4): each window's clock starts at 0.
    # Window 0: decodes [0, 2] and [1, 3] (1.5 each); window 1: [0, 2] twice (2 each).
    # The pairs: window 0 [0, 1] twice (2 each), window 1 [0, 1] and [5, 6] (1 each).
    tokens = [3, 3, 5, 5]  # decode tokens 2, 2, 4, 4 weigh the group's mean
    # A decode is the engine's (TPOT times the tokens after the first) ending at e2e, so an
    # answer that reached the client in one chunk (TTFT = e2e) keeps its decode interval.
    hand = {"sent_s": [0.0, 1.0, 0.0, 0.0], "ttft_s": [0.0, 2.0, 0.0, 0.0], "e2e_s": [2.0] * 4,
            "tpot_s": [1.0, 1.0, 0.5, 0.5], "output_tokens": tokens,
            "pair_sent_s": [0.0, 0.0, 0.0, 5.0], "pair_ttft_s": [0.0, 0.0, 1.0, 0.0],
            "pair_e2e_s": [1.0] * 4, "pair_tpot_s": [0.5, 0.5, 0.25, 0.25],
            "pair_output_tokens": tokens}  # fmt: skip
    job_dir = _served(tmp_path, job, pair_window=2, **hand)
    r = load.load(tmp_path)
    each = serving.batch_sizes(r.requests, r.runs)
    assert each["batch_size"].tolist() == [1.5, 1.5, 2.0, 2.0]
    assert each["pair_batch_size"].tolist() == [2.0, 2.0, 1.0, 1.0]
    # without a TPOT the client's TTFT starts the decode: the burst has none, so the first
    # request decodes alone
    unknown = serving.batch_sizes(r.requests.assign(tpot_s=np.nan), r.runs)["batch_size"]
    assert unknown.iloc[0] == 1.0 and np.isnan(unknown.iloc[1])
    table = serving.with_batch_sizes(
        aggregate.aggregate(r.requests, r.runs, 20), r.requests, r.runs
    )
    (row,) = table.to_dict("records")
    assert row["batch_size"] == pytest.approx((1.5 * 2 * 2 + 2.0 * 4 * 2) / 12)
    assert row["baseline_batch_size"] == pytest.approx((2.0 * 2 * 2 + 1.0 * 4 * 2) / 12)
    # without the window the first request would overlap the second window's two
    alone = r.runs.assign(pair_window=4)
    assert serving.batch_sizes(r.requests, alone)["batch_size"].tolist()[0] > 1.5
    # a run recorded before pair_sent_s: no baseline batch size, priced at the job side's
    path = job_dir / harness_results.REQUESTS
    pq.write_table(pq.read_table(path).drop_columns(["pair_sent_s"]), path)
    run_fixtures.as_before_digests(job_dir)
    old = load.load(tmp_path)
    assert old.skipped == () and old.requests["pair_sent_s"].isna().all()
    assert serving.batch_sizes(old.requests, old.runs)["pair_batch_size"].isna().all()
    table = serving.with_batch_sizes(table, old.requests, old.runs)
    assert table["baseline_batch_size"].tolist() == table["batch_size"].tolist()
    # offline runs have no send times: no batch size
    offline = r.requests.assign(backend="offline")
    assert serving.batch_sizes(offline, r.runs).isna().all().all()


def test_a_calibrated_cost_interpolates_log_log_and_clamps_to_the_calibrated_range():
    levels = pd.Series([1.0, 4.0, 8.0], index=[1, 4, 8])
    assert fit.cost_at(levels, 2) == pytest.approx(2.0)  # cost doubles with the batch
    assert fit.cost_at(levels, np.sqrt(32)) == pytest.approx(np.sqrt(32))
    assert fit.cost_at(levels, 0.5) == pytest.approx(1.0)
    assert fit.cost_at(levels, 64) == pytest.approx(8.0)
    curved = pd.Series([1.0, 9.0], index=[1, 9])  # cost = batch: halfway in logs is 3
    assert fit.cost_at(curved, 3) == pytest.approx(3.0)
    assert np.isnan(fit.cost_at(levels, np.nan)) and np.isnan(fit.cost_at(levels[[]], 2))


LEVELS = (1, 2, 4, 8, 16, 32)


def _steep(job: run_fixtures.Job, draft_as_target: bool) -> float:
    """A verify step that grows with the batch (K = 2 at batch b: 1 + 0.2 b target tokens);
    the plain target's token does not."""
    if draft_as_target:
        return 0.002
    return 0.02 * (1 + 0.1 * job.k * job.concurrency)


def _serving_sweep(tmp_path, rates=(0.5, 1.0, 2.0, 4.0), decode_s=4.0, n=40, sweep="s"):
    """K = 0 and K = 2 server runs at each rate, capped at 32 in flight, sent every
    1 / rate s with ``decode_s`` of decode each, and the steep calibration at
    :data:`LEVELS`."""
    V = {v.name: v for v in run_fixtures.SEED_STUDY}
    for rate in rates:
        for k in (0, 2):
            job = run_fixtures.Job(sweep, V["cot_sd"] if k else V["cot"], "synth_easy", "easy",
                                   k, concurrency=32, n_problems=n, request_rate=rate)  # fmt: skip
            sent = [i / rate for i in range(n)]
            _served(tmp_path, job, sent_s=sent, ttft_s=[0.1] * n, e2e_s=[0.1 + decode_s] * n)
    cal = [run_fixtures.Job(sweep, V["cot_sd"], "synth_easy", "easy", 2, concurrency=c)
           for c in LEVELS]  # fmt: skip
    run_fixtures.write_calibration(tmp_path, cal, _steep)


def test_a_serving_row_is_priced_at_the_batch_size_it_ran_not_its_cap(tmp_path):
    _serving_sweep(tmp_path, rates=(1.0,))
    r = load.load(tmp_path)
    t = tables.build_tables(r, n_boot=50)
    spec = t.table[t.table["k"] == 2].iloc[0]
    # one request every second, 4 s of decode each: about 4 in decode (fewer at the ends)
    b = spec["batch_size"]
    assert 3 < b < 4 and spec["baseline_batch_size"] == pytest.approx(b)
    levels = pd.Series([_steep(j, False) for j in (_job(c) for c in LEVELS)], index=LEVELS)
    assert spec["t_step_s"] == pytest.approx(fit.cost_at(levels, b))
    assert spec["t_target_s"] == pytest.approx(0.02)
    assert spec["tpot_predicted_s"] == pytest.approx(
        spec["t_target_s"] / spec["speedup_tpot_predicted"]
    )
    # at its cap (no batch size: the row priced at its concurrency, 32)
    capped = fit.with_predictions(
        t.table.drop(columns=list(serving.BATCH)), t.positions, t.runs, t.requests
    )
    at_cap = capped[capped["k"] == 2].iloc[0]
    assert at_cap["t_step_s"] == pytest.approx(_steep(_job(32), False))
    assert at_cap["t_target_s"] == at_cap["baseline_tpot_s"]  # measured, as offline rows
    assert abs(at_cap["speedup_tpot_predicted"] / spec["speedup_tpot_predicted"] - 1) > 0.1
    lo, hi = spec["speedup_tpot_predicted_lo"], spec["speedup_tpot_predicted_hi"]
    assert lo < spec["speedup_tpot_predicted"] < hi
    assert np.isnan(at_cap["speedup_tpot_predicted_lo"])  # no interval off the load axis
    text = markdown.table(t.serving, markdown.SERVING)
    assert f"{b:.1f} / {b:.1f}" in text
    assert f"{spec['speedup_tpot_predicted']:.2f} ({lo:.2f} to {hi:.2f})" in text


def _job(concurrency: int) -> run_fixtures.Job:
    v = run_fixtures.SEED_STUDY[3]
    return run_fixtures.Job("s", v, "synth_easy", "easy", 2, concurrency=concurrency)


def test_a_k_schedule_is_a_crossover_of_its_own_along_the_sweeps_that_ran_it():
    """A fixed K and a K schedule of one speculator, each at 1 and 4 in flight in one sweep
    and 16 in another: two crossover rows, each along all three loads."""
    nan = float("nan")
    runs = {("closed", "none"): (1.3, 1.1, 0.7), ("schedule", "1-8k3_9-16k0"): (1.3, 1.1, 0.95)}
    table = pd.DataFrame([
        _row(3, c, nan, speedup, sweep_id=sweep if c < 16 else f"{sweep}-saturated",
             k_schedule=k_schedule)
        for (sweep, k_schedule), speedups in runs.items()
        for c, speedup in zip((1, 4, 16), speedups, strict=True)
    ])  # fmt: skip
    cross = serving.crossovers(table)
    assert list(cross["loads"]) == ["1, 4, 16", "1, 4, 16"]  # not split per sweep
    cross = cross.set_index("k_schedule")
    assert cross.loc["none", "sweep_id"] == "closed, closed-saturated"
    assert (cross.loc["none", "first_below_1"], cross.loc["none", "hurts_from"]) == (16, 16)
    assert cross.loc["1-8k3_9-16k0", "first_below_1"] == 16
    assert np.isnan(cross.loc["1-8k3_9-16k0", "hurts_from"])  # 0.95 [0.85, 1.05]


def test_a_load_made_again_in_a_later_pass_gives_a_crossover_per_pass():
    """One speculator at 1 in flight in one sweep and at 16 in two (a sweep made again):
    two crossover rows, each along 1 and 16 with its own pass's run at 16."""
    nan = float("nan")
    runs = [("trained", 1, 1.4), ("trained-saturated", 16, 0.6),
            ("trained-saturated-repeat", 16, 1.2)]  # fmt: skip
    table = pd.DataFrame([_row(3, c, nan, s, sweep_id=sweep) for sweep, c, s in runs])
    cross = serving.crossovers(table).set_index("sweep_id")
    first, again = (
        "trained (1), trained-saturated (16)",
        "trained (1), trained-saturated-repeat (16)",
    )
    assert sorted(cross.index) == [first, again]
    assert set(cross["loads"]) == {"1, 16"}
    assert cross.loc[first, "first_below_1"] == 16
    assert np.isnan(cross.loc[again, "first_below_1"])


def test_the_predicted_crossover_is_where_the_predicted_speedup_falls_to_1(tmp_path):
    rates = (0.5, 1.0, 2.0, 4.0)
    _serving_sweep(tmp_path, rates=rates)
    t = tables.build_tables(load.load(tmp_path), n_boot=50)
    spec = t.table[t.table["k"] == 2].sort_values("request_rate")
    assert spec["batch_size"].is_monotonic_increasing
    predicted = spec["speedup_tpot_predicted"].to_numpy()
    assert predicted[0] > 1 > predicted[-1]  # the steep verify step stops paying
    (cross,) = t.crossovers.to_dict("records")
    assert cross["predicted_crossover"] == pytest.approx(
        serving.crossing(np.array(rates), predicted)
    )
    assert rates[0] <= cross["predicted_crossover_lo"] <= cross["predicted_crossover"]
    assert cross["predicted_crossover"] <= cross["predicted_crossover_hi"] <= rates[-1]
    assert np.isnan(cross["first_below_1"])  # the measured runs never slow down
    # between the two rates around 1, linearly
    assert serving.crossing(np.array([1.0, 2.0, 4.0]), np.array([1.5, 1.25, 0.75])) == 3.0
    assert serving.crossing(np.array([1.0, 2.0]), np.array([0.9, 0.5])) == 1.0
    assert np.isnan(serving.crossing(np.array([1.0, 2.0]), np.array([1.2, np.nan])))


def test_offline_rows_keep_their_prediction_at_their_concurrency(tmp_path):
    V = {v.name: v for v in run_fixtures.SEED_STUDY}
    offline = [run_fixtures.Job("s", V["cot_sd"] if k else V["cot"], "synth_easy", "easy", k,
                                concurrency=4, n_problems=30) for k in (0, 2)]  # fmt: skip
    for root in (tmp_path / "alone", tmp_path / "mixed"):
        for job in offline:
            run_fixtures.write_job(root, job)
        run_fixtures.write_calibration(root, offline[1:])
    _serving_sweep(tmp_path / "mixed", rates=(1.0,), sweep="serve")  # its own calibration
    alone, mixed = (tables.build_tables(load.load(tmp_path / n), n_boot=50).table
                    for n in ("alone", "mixed"))  # fmt: skip
    mixed = mixed[mixed["backend"] == "offline"]
    assert mixed["batch_size"].isna().all()
    columns = list(fit.PREDICTED)
    pd.testing.assert_frame_equal(
        alone[columns].reset_index(drop=True), mixed[columns].reset_index(drop=True)
    )
    spec = alone[alone["k"] == 2].iloc[0]
    assert spec["t_step_s"] == pytest.approx(run_fixtures.step_time(offline[1]))


def test_a_server_run_whose_outputs_came_in_one_chunk_is_named_with_each_sides_share():
    def run(run_id: str, backend: str, own: list[float], plain: list[float], tokens=50):
        n = len(own)
        return pd.DataFrame({
            "sweep_id": "s", "variant": "cot", "dataset": "synth_easy", "k": 0,
            "concurrency": 1, "run_id": run_id, "backend": backend, "output_tokens": tokens,
            "e2e_s": [0.2] * n, "ttft_s": own, "pair_e2e_s": [0.2] * n, "pair_ttft_s": plain,
        })  # fmt: skip

    requests = pd.concat([
        run("bursts", "server", [0.01] * 4, [0.2, 0.01, 0.01, 0.01]),  # 1 of 4 on the plain side
        run("smooth", "server", [0.01] * 4, [0.01] * 4),
        run("offline", "offline", [0.2] * 4, [0.2] * 4),  # no stream to burst
        run("one token", "server", [0.2] * 4, [0.2] * 4, tokens=1),  # TTFT = e2e by definition
    ])  # fmt: skip
    named = serving.one_chunk(requests)
    assert list(named["run_id"]) == ["bursts"]
    assert named["one_chunk"].iloc[0] == 0 and named["pair_one_chunk"].iloc[0] == 0.25
    assert serving.one_chunk(requests[requests["run_id"] == "smooth"]).empty
    arrow = requests.astype({"backend": "string[pyarrow]"})  # as reports.load reads it
    assert list(serving.one_chunk(arrow)["run_id"]) == ["bursts"]
    assert serving.one_chunk(arrow.iloc[:0]).empty  # every run split off (what-if runs alone)
