"""Aggregates, speedups, bootstrap CIs, fits and verdicts on runs with known numbers."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from harness import results
from harness.calibration import record
from harness.measure import preflight
from reports import aggregate, bootstrap, fit, hypotheses, load, rejections, tables, theory
from reports.report import make_report
from tests import run_fixtures

V = {v.name: v for v in run_fixtures.SEED_STUDY}
HIST = [[1, 1, 1], [2, 0, 2], [0, 0, 3], [1, 2, 0]]  # verify steps that accepted 0, 1, 2 drafts


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    """cot at K=0 and cot_sd at K=2 on 4 problems, every number set by hand (loaded and
    aggregated once: the tests that change its requests change a copy)."""
    tmp_path = tmp_path_factory.mktemp("hand")
    base = run_fixtures.Job("h", V["cot"], "synth_easy", "easy", 0, n_problems=4)
    spec = run_fixtures.Job("h", V["cot_sd"], "synth_easy", "easy", 2, n_problems=4)
    same = {"correct": [True, False, True, True], "output_tokens": [10, 20, 30, 40],
            "ttft_s": [0.1] * 4}  # fmt: skip
    steps = [sum(h) for h in HIST]
    accepted = [h[1] + 2 * h[2] for h in HIST]
    run_fixtures.write_job(tmp_path, base, run_fixtures.with_columns(
        run_fixtures.records(base), **same, tpot_s=[0.02, 0.02, 0.04, 0.04],
        e2e_s=[1.0, 2.0, 3.0, 4.0]))  # fmt: skip
    run_fixtures.write_job(tmp_path, spec, run_fixtures.with_columns(
        run_fixtures.records(spec), **same, tpot_s=[0.01, 0.01, 0.02, 0.02],
        e2e_s=[0.5, 1.0, 1.5, 2.0], acceptance_histogram=HIST, num_spec_steps=steps,
        num_draft_tokens=[2 * s for s in steps], num_accepted_tokens=accepted))  # fmt: skip
    r = load.load(tmp_path)
    return r, aggregate.aggregate(r.requests, r.runs, n_boot=200).set_index("k")


def test_statistics_equal_hand_computed_values(hand):
    _, t = hand
    base, spec = t.loc[0], t.loc[2]
    assert base["accuracy"] == spec["accuracy"] == 0.75
    assert base["output_tokens"] == 25.0
    assert base["tpot_s"] == pytest.approx(0.03) and spec["tpot_s"] == pytest.approx(0.015)
    assert base["e2e_p50_s"] == pytest.approx(2.5) and base["e2e_p90_s"] == pytest.approx(3.7)
    assert base["tokens_per_s"] == pytest.approx(100 / 10)
    # 13 verify steps, 15 accepted of 26 proposed; positions tried 13 + 9 times
    assert spec["acceptance_rate"] == pytest.approx(15 / 26)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 15 / 13)
    assert spec["alpha"] == pytest.approx(15 / 22)
    assert np.isnan(base["acceptance_rate"])  # no drafts at K = 0
    assert spec["n_problems"] == 4 and spec["n_requests"] == 4 and spec["n_runs"] == 1


def test_acceptance_along_the_answer_pools_each_third_over_requests(tmp_path):
    base = run_fixtures.Job("t", V["cot"], "synth_easy", "easy", 0, n_problems=3)
    spec = run_fixtures.Job("t", V["cot_sd"], "synth_easy", "easy", 2, n_problems=3)
    run_fixtures.write_job(tmp_path, base, run_fixtures.records(base))
    # the third request's steps could not be placed (steps without drafts): left out
    run_fixtures.write_job(tmp_path, spec, run_fixtures.with_columns(
        run_fixtures.records(spec), accepted_thirds=[[4, 2, 0], [2, 2, 1], None],
        drafted_thirds=[[4, 4, 4], [4, 2, 6], None]))  # fmt: skip
    r = load.load(tmp_path)
    row = aggregate.aggregate(r.requests, r.runs, n_boot=200).set_index("k").loc[2]
    assert row["acceptance_early"] == pytest.approx(6 / 8)
    assert row["acceptance_middle"] == pytest.approx(4 / 6)
    assert row["acceptance_late"] == pytest.approx(1 / 10)
    assert row["acceptance_early_lo"] <= 6 / 8 <= row["acceptance_early_hi"]


def test_every_latency_percentile_interpolates_linearly_as_vllm_does(hand):
    r, _ = hand
    two = r.requests[r.requests["k"] == 0].head(2)
    # two requests of one gap each: ITL gaps 1 s and 2 s, as TTFT, TPOT and e2e
    two = two.assign(ttft_s=[1.0, 2.0], tpot_s=[1.0, 2.0], e2e_s=[1.0, 2.0], output_tokens=[2, 2])
    (row,) = aggregate._quantiles(two).to_dict("records")
    for m in ("ttft", "tpot", "e2e", "itl"):
        assert [row[f"{m}_p{p}_s"] for p in (50, 90, 99)] == pytest.approx([1.5, 1.9, 1.99]), m
    # ITL weighs a request by its gaps: 1 gap of 1 s and 3 of 2 s
    four = two.assign(output_tokens=[2, 4])
    (row,) = aggregate._quantiles(four).to_dict("records")
    assert row["itl_p50_s"] == 2.0 and row["tpot_p50_s"] == 1.5


def test_requests_with_fewer_drafts_than_k_per_step_are_counted_and_noted(hand):
    from reports import markdown

    r, _ = hand
    requests = r.requests.copy()
    first = requests.index[requests["k"] == 2][0]
    requests.loc[first, "num_draft_tokens"] -= 1  # one step proposed 1 draft, not 2
    built = tables.build_tables(dataclasses.replace(r, requests=requests), n_boot=50)
    t = built.table.set_index("k")
    assert t.loc[2, "n_short_proposals"] == 1 and t.loc[0, "n_short_proposals"] == 0
    notes = "\n".join(markdown._trust(built.table, built.runs))
    assert "1 request(s) had verify steps with fewer than K drafts" in notes


def test_the_fitted_a_leaves_failed_requests_out_as_every_statistic_does(hand):
    r, _ = hand
    requests = r.requests.copy()
    first = requests.index[requests["k"] == 2][0]
    requests.loc[first, "finish_reason"] = "abort"
    t = tables.build_tables(dataclasses.replace(r, requests=requests), n_boot=50)
    alpha = t.table.set_index("k").loc[2, "alpha"]
    assert alpha != pytest.approx(15 / 22)  # the failed request's steps are out
    assert t.fits.iloc[0]["alpha"] == pytest.approx(alpha)


def test_speedups_are_baseline_over_variant(hand):
    _, t = hand
    spec = t.loc[2]
    for name in ("speedup_tpot", "speedup_e2e", "speedup_tokens_per_s"):
        assert spec[name] == pytest.approx(2.0)
        assert spec[f"{name}_lo"] <= spec[name] <= spec[f"{name}_hi"]
    assert spec["speedup_throughput"] == pytest.approx(2.0)  # wall time halves too
    assert t.loc[0, "speedup_tpot"] == 1.0


def test_per_position_acceptance_from_histograms(hand):
    r, _ = hand
    pos = aggregate.positions(r.requests, n_boot=200)
    assert list(pos["position"]) == [1, 2]
    assert pos["acceptance"].tolist() == pytest.approx([9 / 13, 6 / 9])
    assert (pos["lo"] <= pos["acceptance"]).all() and (pos["acceptance"] <= pos["hi"]).all()


def test_lossless_fraction_is_against_the_k0_run_of_the_same_target_and_max_tokens(tmp_path):
    jobs = {v: run_fixtures.Job("l", V[v], "synth_easy", "easy", k, n_problems=10)
            for v, k in (("cot", 0), ("cod", 0), ("cot_sd", 2), ("cod_sd", 2))}  # fmt: skip
    for v in ("cot", "cod", "cod_sd"):
        run_fixtures.write_job(tmp_path, jobs[v])
    recs = run_fixtures.records(jobs["cot_sd"])
    lossy = ["changed"] * 3 + [r.output_hash for r in recs[3:]]
    run_fixtures.write_job(
        tmp_path, jobs["cot_sd"], run_fixtures.with_columns(recs, output_hash=lossy)
    )
    r = load.load(tmp_path)
    runs = aggregate.with_lossless(r.requests, r.runs).set_index("variant")["lossless_fraction"]
    assert runs["cot_sd"] == pytest.approx(0.7) and runs["cod_sd"] == 1.0
    assert np.isnan(runs["cot"]) and np.isnan(runs["cod"])
    groups = aggregate.aggregate(r.requests, runs.reset_index().pipe(
        lambda x: r.runs.merge(x, on="variant")), n_boot=50).set_index("variant")  # fmt: skip
    assert groups.loc["cot_sd", "lossless_fraction"] == pytest.approx(0.7)
    other_length = r.runs.assign(max_tokens=np.where(r.runs["k"] == 0, 99, r.runs["max_tokens"]))
    assert aggregate.with_lossless(r.requests, other_length)["lossless_fraction"].isna().all()


def test_position_counts_skip_null_histograms():
    hist = pd.Series([[1, 1, 1], None, [0, 2]], dtype=pd.ArrowDtype(pa.list_(pa.int64())))
    counts = aggregate.position_counts(hist)
    assert counts.to_dict("list") == {
        "row": [0, 0, 2],
        "position": [1, 2, 1],
        "reached": [3, 2, 2],
        "accepted": [2, 1, 2],
    }


def test_the_predictions_t_target_is_the_baseline_on_the_problems_the_speedup_pairs(tmp_path):
    """Sequential: the K = 0 run's TPOT on the problems both answered (a slow problem the
    K > 0 run lacks stays out); interleaved: the plain target's calibrated time measured in
    the same window as T_step."""
    base = run_fixtures.Job("w", V["cot"], "synth_easy", "easy", 0, n_problems=4)
    spec = run_fixtures.Job("w", V["cot_sd"], "synth_easy", "easy", 2, n_problems=4)
    run_fixtures.write_job(tmp_path, base, run_fixtures.with_columns(
        run_fixtures.records(base), tpot_s=[0.02, 0.02, 0.02, 1.0]))  # fmt: skip
    run_fixtures.write_job(tmp_path, spec, run_fixtures.records(spec)[:3])
    run_fixtures.write_calibration(tmp_path, [base, spec])
    row = tables.build_tables(load.load(tmp_path), n_boot=50).table.set_index("k").loc[2]
    assert row["t_target_s"] == pytest.approx(0.02)  # not the mean over 4 problems, 0.265
    paired = dataclasses.replace(spec, sweep="p", pairing="interleaved")
    run_fixtures.write_job(tmp_path, paired)
    run_fixtures.write_calibration(tmp_path, [paired])
    cal = next((tmp_path / "p" / ".calibration").glob("*-2-1.json"))
    record = json.loads(cal.read_text())
    record["measurements"]["1"]["baseline_per_unit_s"] = 0.033  # timed beside T_step
    cal.write_text(json.dumps(record))
    t = tables.build_tables(load.load(tmp_path), n_boot=50).table
    row = t[t["sweep_id"] == "p"].set_index("k").loc[2]
    assert row["t_target_s"] == pytest.approx(0.033)


def test_cost_model_predicts_from_calibrated_step_times_and_finds_the_best_k(tmp_path):
    v = V["cot_sd"]
    jobs = [run_fixtures.Job("f", V["cot"], "synth_easy", "easy", 0, n_problems=150)] + [
        run_fixtures.Job("f", v, "synth_easy", "easy", k, n_problems=150) for k in (1, 3)
    ]
    for j in jobs:
        run_fixtures.write_job(tmp_path, j)
    run_fixtures.write_calibration(tmp_path, jobs)
    t1 = run_fixtures.TARGET_TPOT_S  # a step costs K c + 1 target tokens, a draft token c
    base_dir = tmp_path / "f" / jobs[0].name
    counts = {"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 21}
    # one request of 7 decode tokens, the draft wrong on the 4th only: K = 3 takes 2 steps
    preflight_file = {v.draft_model: {"ks": {"3": counts}, "agree": {"p": "1110111"}}}
    (base_dir / preflight.PREFLIGHT).write_text(json.dumps(preflight_file))
    r = load.load(tmp_path)
    assert not r.skipped  # the calibration directory is not a run
    t = tables.build_tables(r, n_boot=300)
    rows = t.table.set_index("k")
    for k in (1, 3):
        row = rows.loc[k]
        assert row["t_step_s"] == pytest.approx(t1 * (k * v.cost + 1))
        assert row["c"] == pytest.approx(v.cost)
        assert row["speedup_tpot_lo"] <= row["speedup_tpot_predicted"] <= row["speedup_tpot_hi"]
        # T_step = T_target (K c + 1) exactly: the two models differ by T1 measured / T1 only
        ratio = row["speedup_tpot_predicted"] / row["speedup_tpot_predicted_simple"]
        assert ratio == pytest.approx(row["t_target_s"] / t1)
    assert np.isnan(rows.loc[0, "speedup_tpot_predicted"])
    assert rows.loc[3, "acceptance_preflight"] == pytest.approx(0.7)
    assert rows.loc[3, "mean_acceptance_length_preflight"] == pytest.approx(3.1)
    expected = 7 / 2 * rows.loc[3, "t_target_s"] / rows.loc[3, "t_step_s"]
    assert rows.loc[3, "speedup_tpot_preflight"] == pytest.approx(expected)
    assert np.isnan(rows.loc[1, "acceptance_preflight"])
    f = t.fits.iloc[0]
    assert f["alpha_lo"] <= v.alpha <= f["alpha_hi"]
    assert f["alpha_vllm"] == pytest.approx(f["alpha"])  # counters agree with the requests
    assert f["best_k_predicted"] == f["best_k_measured"] == 3 and f["best_k_agrees"]
    assert f["ks"] == "1,3" and f["c"] == pytest.approx(v.cost)
    assert t.model_check.startswith("cost model: 2 of 2 K > 0 rows within 10%")


def test_speculation_off_is_priced_from_its_own_calibration_and_a_schedule_keeps_its_own(
    tmp_path,
):
    v = V["cot_sd"]
    jobs = [run_fixtures.Job("f", v, "synth_easy", "easy", k, concurrency=c, n_problems=30)
            for k in (0, 1) for c in (1, 4)]  # fmt: skip
    for j in jobs:
        run_fixtures.write_job(tmp_path, j)
    run_fixtures.write_calibration(tmp_path, jobs)
    out = tmp_path / "f" / record.CALIBRATION

    def save(name, k, schedule, seconds):  # per token (off) or per verify step
        ms = {str(c): {"concurrency": c, "requests": 3, "decode_s": 1.0, "units": 10,
                       "per_unit_s": seconds * c} for c in (1, 4)}  # fmt: skip
        record.save(out / name, {"target": v.target_model, "draft": v.draft_model, "k": k,
                                 "k_schedule": schedule, "identity": {},
                                 "measurements": ms})  # fmt: skip

    save("off.json", 0, "1-32k0", 0.05)
    save("scheduled.json", 1, "1-2k1_3-32k0", 9.0)  # another engine than the fixed K = 1
    rows = tables.build_tables(load.load(tmp_path), n_boot=50).table.set_index(["k", "concurrency"])
    for c in (1, 4):
        plain = run_fixtures.step_time(dataclasses.replace(jobs[0], concurrency=c))
        assert rows.loc[(1, c), "speedup_off_predicted"] == pytest.approx(plain / (0.05 * c))
        fixed = run_fixtures.step_time(dataclasses.replace(jobs[2], concurrency=c))
        assert rows.loc[(1, c), "t_step_s"] == pytest.approx(fixed)  # not the schedule's 9 s
    assert rows.loc[(0, 1), ["speedup_off_predicted"]].isna().all()


def test_a_schedules_k0_level_prices_verify_steps_at_the_nearest_lower_level():
    def row(schedule, c, seconds, k=3, per_token=0.04):  # per_token: a K = 0 level's
        return {"sweep_id": "s", "target": "t", "draft": "d", "k": k, "k_schedule": schedule,
                "concurrency": c, "per_unit_s": seconds, "undrafted_step_s": per_token}  # fmt: skip

    cal = pd.DataFrame([row("1-2k3_3-32k0", 16, None), row("1-2k3_3-32k0", 1, 0.05),
                        row("1-2k3_3-32k0", 4, None), row("1-8k3_9-32k0", 16, None),
                        row("1-8k3_9-32k0", 1, 0.06), row("1-8k3_9-32k0", 4, None, per_token=None),
                        row(load.FIXED_K, 1, 0.03), row(load.FIXED_K, 4, None),
                        row("1-32k0", 4, 0.02, k=0)])  # fmt: skip
    prices = fit.verify_steps(cal).set_index(["k_schedule", "concurrency"])["per_unit_s"]
    assert prices[("1-2k3_3-32k0", 4)] == prices[("1-2k3_3-32k0", 16)] == 0.05
    assert prices[("1-8k3_9-32k0", 16)] == 0.06
    assert np.isnan(prices[("1-8k3_9-32k0", 4)])  # a drafting level left unpriced stays so
    assert np.isnan(prices[(load.FIXED_K, 4)])  # one K: a missing price stays missing
    assert "1-32k0" not in prices.index.get_level_values(0)  # speculation off is not K > 0


@pytest.mark.parametrize("calibrated_plain_steps", [True, False])
def test_prompt_lookup_steps_without_drafts_cost_their_own_time(tmp_path, calibrated_plain_steps):
    lookup = run_fixtures.Variant("cot_ngram", "cot", "ngram", "cot", 0.70, 200)
    base = run_fixtures.Job("f", V["cot"], "synth_easy", "easy", 0, n_problems=20)
    job = run_fixtures.Job("f", lookup, "synth_easy", "easy", 3, n_problems=20)
    run_fixtures.write_job(tmp_path, base)
    # 41 decode tokens a request: 5 verify steps accept all 3 drafts (20 tokens), and the
    # other 21 tokens come one a step from steps whose lookup found no match
    ids = [tuple(range(i, i + 42)) for i in range(20)]
    recs = run_fixtures.with_columns(
        run_fixtures.records(job), output_tokens=[42] * 20, output_token_ids=ids,
        num_spec_steps=[5] * 20, num_draft_tokens=[15] * 20, num_accepted_tokens=[15] * 20,
        acceptance_histogram=[(0, 0, 0, 5)] * 20,
    )  # fmt: skip
    run_fixtures.write_job(tmp_path, job, recs)
    t_verify, t_lookup_miss, t_plain = 0.009, 0.004, 0.0035

    def save(draft, k, seconds, undrafted_s=None):
        m = {"concurrency": 1, "requests": 3, "decode_s": 1.0, "units": 1,
             "per_unit_s": seconds, "undrafted": 1, "undrafted_step_s": undrafted_s}  # fmt: skip
        written = {"target": lookup.target_model, "draft": draft, "k": k, "identity": {},
                   "measurements": {"1": m}}  # fmt: skip
        record.save(tmp_path / "f" / record.CALIBRATION / f"{k}.json", written)

    save(None, 0, t_plain)
    save(lookup.draft_model, 3, t_verify, t_lookup_miss if calibrated_plain_steps else None)
    row = tables.build_tables(load.load(tmp_path), n_boot=50).table.set_index("k").loc[3]
    # without a calibrated step of its own, a step without drafts costs a target token
    miss = t_lookup_miss if calibrated_plain_steps else t_plain
    expected = row["t_target_s"] * 41 / (5 * t_verify + 21 * miss)
    assert row["speedup_tpot_predicted"] == pytest.approx(expected)
    # the verify steps alone would give E x T_target / T_step with E = 4
    assert row["speedup_tpot_predicted"] < 4 * row["t_target_s"] / t_verify


def test_without_calibration_the_predictions_are_missing(tmp_path):
    for k in (0, 1):
        variant = V["cot"] if k == 0 else V["cot_sd"]
        run_fixtures.write_job(tmp_path, run_fixtures.Job("f", variant, "synth_easy", "easy", k))
    t = tables.build_tables(load.load(tmp_path), n_boot=50)
    assert t.table["speedup_tpot_predicted"].isna().all()
    assert t.fits.iloc[0]["best_k_predicted"] == -1
    assert t.model_check.startswith("cost model: no K > 0 row has a calibration")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The seed study on 200 problems: plain variants at K=0, draft variants at K=1,3."""
    root = tmp_path_factory.mktemp("study")
    for job in run_fixtures.seed_study_jobs("s", ks=(1, 3), n_problems=200):
        run_fixtures.write_job(root, job)
    r = load.load(root)
    return r, aggregate.aggregate(r.requests, r.runs, n_boot=400)


def test_confidence_intervals_contain_the_true_values(study):
    _, t = study
    truth = {v.name: v for v in run_fixtures.SEED_STUDY}
    acc = t.apply(lambda r: r["accuracy_lo"] <= truth[r["variant"]].accuracy
                  <= r["accuracy_hi"], axis=1)  # fmt: skip
    spec = t[t["k"] > 0]
    alpha = spec.apply(lambda r: r["alpha_lo"] <= truth[r["variant"]].alpha <= r["alpha_hi"],
                       axis=1)  # fmt: skip
    true_speedup = spec.apply(lambda r: theory.predicted_speedup(
        truth[r["variant"]].alpha, r["k"], truth[r["variant"]].cost), axis=1)  # fmt: skip
    speedup = (spec["speedup_tpot_lo"] <= true_speedup) & (true_speedup <= spec["speedup_tpot_hi"])
    # 95% intervals: nearly all must cover; a biased estimator or a too-narrow CI would not
    assert acc.mean() >= 0.8 and alpha.mean() >= 0.8 and speedup.mean() >= 0.8
    assert (spec["speedup_tpot_hi"] - spec["speedup_tpot_lo"]).max() < 0.2


def test_seeds_pool_into_their_problems(tmp_path):
    for seed in (0, 1):
        run_fixtures.write_job(tmp_path, run_fixtures.Job("p", V["cot"], "synth_easy", "easy", 0,
                                                    seed=seed, n_problems=30))  # fmt: skip
    r = load.load(tmp_path)
    row = aggregate.aggregate(r.requests, r.runs, n_boot=100).iloc[0]
    assert row["n_runs"] == 2 and row["seeds"] == "0,1"
    assert row["n_problems"] == 30 and row["n_requests"] == 60
    assert row["accuracy"] == pytest.approx(r.requests["correct"].mean())


def test_speedup_needs_a_baseline_of_the_same_target_and_concurrency(tmp_path):
    jobs = [
        run_fixtures.Job("m", V["cod"], "synth_easy", "easy", 0, n_problems=20),
        run_fixtures.Job("m", V["cod_sd"], "synth_easy", "easy", 2, n_problems=20),
        run_fixtures.Job("m", V["cot_sd"], "synth_easy", "easy", 2, n_problems=20),
        run_fixtures.Job("m", V["cod_sd"], "synth_easy", "easy", 2, concurrency=4, n_problems=20),
    ]
    for j in jobs:
        run_fixtures.write_job(tmp_path, j)
    r = load.load(tmp_path)
    t = aggregate.aggregate(r.requests, r.runs, n_boot=100)
    speedup = t.set_index(["variant", "concurrency"])["speedup_tpot"]
    assert speedup[("cod_sd", 1)] > 1
    assert np.isnan(speedup[("cot_sd", 1)])  # no cot target at K = 0
    assert np.isnan(speedup[("cod_sd", 4)])  # no K = 0 run at concurrency 4


def test_headline_picks_k0_for_plain_and_best_k_for_draft_variants(study):
    _, t = study
    h = aggregate.headline(t)
    assert len(h) == 5 * 3  # variants x datasets
    assert (h.loc[h["draft"] == "none", "k"] == 0).all()
    assert (h.loc[h["draft"] != "none", "k"] == 3).all()  # K=3 beats K=1 at c=0.08


def test_bootstrap_ratio_and_paired_comparisons():
    rng = np.random.default_rng(0)
    num, den = rng.random((50, 2)), rng.random((50, 2)) + 1
    point, lo, hi = bootstrap.ratio(num, den, 500, seed=1)
    assert point == pytest.approx(num.sum(0) / den.sum(0))
    assert (lo < point).all() and (point < hi).all()
    same = bootstrap.paired((num, den), (num, den), "ratio", 200)
    assert np.allclose(same, 1.0)  # identical groups: ratio 1 with no spread
    diff = bootstrap.paired((num, den), (num * 2, den), "difference", 200)
    assert diff[0] == pytest.approx(num.sum(0) / den.sum(0))
    with pytest.raises(ValueError, match="how='sum'"):
        bootstrap.paired((num, den), (num, den), "sum", 10)


@pytest.mark.parametrize("data_seed", [0, 2])
def test_bootstrap_intervals_are_bca_as_scipy_computes_them(data_seed):
    """A mean of 12 skewed values: scipy's BCa bounds, which the percentile interval misses
    by 10-20% here; a paired ratio likewise."""
    from scipy.stats import bootstrap as scipy_bootstrap

    rng = np.random.default_rng(data_seed)
    x, y = rng.lognormal(0, 1.5, 12), rng.lognormal(0, 1.5, 12)
    ones = np.ones((12, 1))
    _, lo, hi = bootstrap.ratio(x[:, None], ones, 20000, seed=3)
    want = scipy_bootstrap((x,), np.mean, method="BCa", n_resamples=20000, random_state=3)
    assert lo[0] == pytest.approx(want.confidence_interval.low, rel=0.03)
    assert hi[0] == pytest.approx(want.confidence_interval.high, rel=0.03)
    _, lo, hi = bootstrap.paired((x[:, None], ones), (y[:, None], ones), "ratio", 20000, 3)
    want = scipy_bootstrap(
        (x, y), lambda a, b, axis=-1: b.mean(axis) / a.mean(axis), paired=True,
        method="BCa", n_resamples=20000, random_state=3,
    ).confidence_interval  # fmt: skip
    assert lo[0] == pytest.approx(want.low, rel=0.03) and hi[0] == pytest.approx(
        want.high, rel=0.03
    )


@pytest.mark.usefixtures("unrasterized")
def test_replicates_with_a_zero_denominator_are_counted_and_noted(tmp_path):
    den = np.array([[0.0], [0.0], [1.0]])
    w = bootstrap.weights(3, 1000, 0)
    assert bootstrap.dropped(den, 1000, 0)[0] == (w[:, 2] == 0).sum() > 200
    _, lo, hi = bootstrap.ratio(np.array([[0.0], [0.0], [0.5]]), den, 1000, 0)
    assert lo[0] == hi[0] == 0.5  # from the replicates that drew problem 2 only
    job = run_fixtures.Job("t", run_fixtures.SEED_STUDY[1], "synth_easy", "easy", 0, n_problems=3)
    recs = run_fixtures.with_columns(run_fixtures.records(job), tpot_s=[None, None, 0.02])
    run_fixtures.write_job(tmp_path, job, recs)
    text = make_report(tmp_path, tmp_path / "out", n_boot=1000).read_text()
    assert f"up to {(w[:, 2] == 0).sum()} bootstrap replicate(s)" in text


def test_bootstrap_weights_are_fixed_by_size_and_seed():
    w = bootstrap.weights(30, 100, 0)
    assert w.shape == (100, 30) and (w.sum(axis=1) == 30).all()  # each replicate draws 30
    assert np.array_equal(w, bootstrap.weights(30, 100, 0).copy())
    assert not np.array_equal(w, bootstrap.weights(30, 100, 1))
    assert abs(w.mean() - 1) < 0.05 and w.max() > 1  # drawn with replacement


def test_verdicts_follow_the_synthetic_truths(study):
    r, t = study
    verdicts = hypotheses.judge(r.requests, t, n_boot=300)
    by = {}
    for v in verdicts:
        by.setdefault(v.hypothesis, []).append(v.verdict)
    assert by[1] == ["supported"] * 6  # cot, cod (0.70, 0.66) vs base (0.35) on 3 datasets
    assert by[2] == ["supported"] * 6  # lossless: accuracy difference exactly 0
    assert len(by[3]) == 3 and "refuted" not in by[3]  # 0.4x tokens, accuracy -0.04


def test_chain_of_draft_verdicts_resolve_with_enough_problems(tmp_path):
    cot = V["cot"]
    equal = run_fixtures.Variant("cod", "cod", None, "cod", cot.accuracy, 80)
    worse = run_fixtures.Variant("cod", "cod", None, "cod", cot.accuracy - 0.3, 80)
    for sweep, cod in (("equal", equal), ("worse", worse)):
        for v in (cot, cod):
            run_fixtures.write_job(tmp_path, run_fixtures.Job(sweep, v, "synth_easy", "easy", 0,
                                                        n_problems=4000))  # fmt: skip
    r = load.load(tmp_path)
    t = aggregate.aggregate(r.requests, r.runs, n_boot=300)
    verdicts = {v.sweep_id: v for v in hypotheses.judge(r.requests, t, n_boot=300)}
    assert verdicts["equal"].verdict == "supported", verdicts["equal"].evidence
    assert verdicts["worse"].verdict == "refuted", verdicts["worse"].evidence


def test_rejected_tokens_are_classified_by_kind():
    texts = pd.Series(["12", " 3.5", "+", " =", "\\frac", "{", " the", "apples", "\n", " ",
                       "x2", "."])  # fmt: skip
    assert rejections.token_kinds(texts).tolist() == [
        "digit", "digit", "operator", "operator", "latex", "latex", "word", "word",
        "whitespace", "whitespace", "other", "other",
    ]  # fmt: skip


def test_rejection_shares_sum_to_one_per_variant(study):
    r, _ = study
    kinds = rejections.rejection_kinds(r.requests)
    shares = kinds.groupby(["variant", "dataset"])["share"].sum()
    assert np.allclose(shares, 1.0) and set(kinds["variant"]) == {"cot_sd", "cod_sd"}
    top = kinds.loc[kinds.groupby(["variant", "dataset"])["share"].idxmax()]
    assert set(top.loc[top["variant"] == "cot_sd", "kind"]) == {"word"}  # synthetic mix
    assert set(top.loc[top["variant"] == "cod_sd", "kind"]) == {"digit"}


def test_strict_and_flexible_accuracy_beside_the_headline(tmp_path):
    graded = run_fixtures.Job("s", V["cot"], "synth_easy", "easy", 0, n_problems=4)
    old = run_fixtures.Job("s", V["cod"], "synth_easy", "easy", 0, n_problems=4)
    run_fixtures.write_job(tmp_path, graded, run_fixtures.with_columns(
        run_fixtures.records(graded), correct=[True, True, True, False],
        correct_strict=[True, False, False, False], correct_flexible=[True, True, False, True]))  # fmt: skip
    run_fixtures.write_job(tmp_path, old, run_fixtures.records(old))  # recorded before both
    r = load.load(tmp_path)
    t = aggregate.aggregate(r.requests, r.runs, n_boot=50).set_index("variant")
    assert t.loc["cot", "accuracy"] == 0.75
    assert t.loc["cot", "accuracy_strict"] == 0.25 and t.loc["cot", "accuracy_flexible"] == 0.75
    assert np.isnan(t.loc["cod", "accuracy_strict"]) and np.isnan(t.loc["cod", "accuracy_flexible"])


def test_serving_rows_pair_each_rate_with_its_own_baseline_and_find_the_crossover(tmp_path):
    # the speculative side slows down as the load rises (speed), its baseline does not
    slowdown = {1.0: 1.0, 2.0: 1.0, 4.0: 3.0, 8.0: 3.0}
    for rate, speed in slowdown.items():
        for k in (0, 2):
            job = run_fixtures.Job("serve", V["cot_sd"] if k else V["cot"], "synth_easy", "easy",
                                   k, concurrency=8, n_problems=40, request_rate=rate,
                                   speed=speed if k else 1.0)  # fmt: skip
            recs = run_fixtures.records(job)
            itl = [(r.tpot_s,) * (r.output_tokens - 1) for r in recs]  # streamed gaps
            run_fixtures.write_job(tmp_path, job, run_fixtures.with_columns(recs, itl_s=itl))
    r = load.load(tmp_path)
    t = tables.build_tables(r, n_boot=200)
    rows = t.serving.set_index(["k", "request_rate"])
    assert list(t.serving["backend"].unique()) == ["server"] and len(rows) == 8
    for rate in slowdown:  # each rate's baseline is the K = 0 run at that rate
        assert rows.loc[(0, rate), "speedup_tpot"] == pytest.approx(1.0)
        mine, base = (r.requests[(r.requests["k"] == k) & (r.requests["request_rate"] == rate)]
                      for k in (2, 0))  # fmt: skip
        expected = base["tpot_s"].mean() / mine["tpot_s"].mean()
        assert rows.loc[(2, rate), "speedup_tpot"] == pytest.approx(expected)
    assert rows.loc[(2, 1.0), "speedup_tpot_lo"] > 1 > rows.loc[(2, 8.0), "speedup_tpot_hi"]
    (cross,) = t.crossovers.to_dict("records")
    assert (cross["axis"], cross["loads"]) == ("req/s", "1, 2, 4, 8")
    assert (cross["helps_up_to"], cross["first_below_1"], cross["hurts_from"]) == (2.0, 4.0, 4.0)
    # ITL percentiles come from the streamed gaps: here each request's gaps equal its TPOT
    gaps = np.concatenate([np.asarray(x) for x in r.requests.loc[
        (r.requests["k"] == 2) & (r.requests["request_rate"] == 8.0), "itl_s"]])  # fmt: skip
    assert rows.loc[(2, 8.0), "itl_p99_s"] == pytest.approx(np.percentile(gaps, 99))
    assert r.runs["backend"].eq("server").all()


def test_a_closed_loop_crossover_reads_the_concurrencies_across_the_sweeps_that_ran_them(
    tmp_path,
):
    """Closed loop on servers at 1 and 4 in flight in one sweep and 16 in another: one
    crossover row along the concurrencies; a concurrency run in both sweeps gives a row per
    sweep that ran it, each along all three."""
    slowdown = {("closed", 1): 1.0, ("closed", 4): 1.0, ("saturated", 16): 3.0}
    for (sweep, c), speed in slowdown.items():
        for k in (0, 2):
            job = run_fixtures.Job(sweep, V["cot_sd"] if k else V["cot"], "synth_easy", "easy",
                                   k, concurrency=c, n_problems=40, server=True,
                                   speed=speed if k else 1.0)  # fmt: skip
            run_fixtures.write_job(tmp_path, job, run_fixtures.records(job))
    t = tables.build_tables(load.load(tmp_path), n_boot=200)
    (cross,) = t.crossovers.to_dict("records")
    assert (cross["sweep_id"], cross["axis"], cross["loads"]) == (
        "closed, saturated",
        "in flight",
        "1, 4, 16",
    )
    assert (cross["helps_up_to"], cross["first_below_1"], cross["hurts_from"]) == (4.0, 16.0, 16.0)
    for k in (0, 2):  # the saturated sweep runs 4 in flight too: a row with each one's 4
        job = run_fixtures.Job("saturated", V["cot_sd"] if k else V["cot"], "synth_easy", "easy",
                               k, concurrency=4, n_problems=40, server=True)  # fmt: skip
        run_fixtures.write_job(tmp_path, job, run_fixtures.records(job))
    t = tables.build_tables(load.load(tmp_path), n_boot=200)
    assert [(c["sweep_id"], c["loads"]) for c in t.crossovers.to_dict("records")] == [
        ("closed (1, 4), saturated (16)", "1, 4, 16"),
        ("closed (1), saturated (4, 16)", "1, 4, 16"),
    ]


def _goodput(tmp_path, own_slo, slo, aborted=()):
    """Goodput of the base (tpot 20, 20, 40, 40 ms; e2e 1-4 s; wall 10 s) and spec (tpot
    10, 10, 20, 20 ms; e2e 0.5-2 s; wall 5 s) runs of 4 problems, each run's config SLO
    ``own_slo``, the report's bounds ``slo``; ``aborted``: spec requests that failed."""
    jobs = [run_fixtures.Job("g", V[v], "synth_easy", "easy", k, n_problems=4, request_rate=1.0)
            for v, k in (("cot", 0), ("cot_sd", 2))]  # fmt: skip
    for job, tpot, e2e in zip(jobs, ([0.02, 0.02, 0.04, 0.04], [0.01, 0.01, 0.02, 0.02]),
                              ([1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 1.5, 2.0]), strict=True):  # fmt: skip
        finish = ["abort" if job.k and i in aborted else "stop" for i in range(4)]
        recs = run_fixtures.with_columns(run_fixtures.records(job), ttft_s=[0.1] * 4,
                                         tpot_s=tpot, e2e_s=e2e, finish_reason=finish)  # fmt: skip
        summary = run_fixtures.summary(job, recs)
        summary = dataclasses.replace(summary, config={**summary.config, "slo": own_slo})
        results.write_job(tmp_path / job.sweep / job.name, recs, summary)
    t = tables.build_tables(load.load(tmp_path), n_boot=50, slo=slo)
    return t.runs.set_index("k")[["goodput", "slo"]], t.serving.set_index("k")


@pytest.mark.parametrize(
    ("own_slo", "slo", "aborted", "base", "spec", "label"),
    [
        ({}, None, (), np.nan, np.nan, "none"),  # no bound: no goodput
        ({"tpot_ms": 30}, None, (), 2 / 10, 4 / 5, "tpot 30"),  # the run's own SLO
        ({"tpot_ms": 30}, {"tpot_ms": None}, (), np.nan, np.nan, "none"),  # the report lifts it
        ({"tpot_ms": 30}, {"e2e_ms": 1500}, (), 1 / 10, 3 / 5, "tpot 30, e2e 1500"),  # both
        ({"e2e_ms": 1500}, None, (0, 2), 1 / 10, 1 / 5, "e2e 1500"),  # failed ones never count
    ],
)
def test_goodput_counts_answered_requests_meeting_the_runs_slo_or_the_reports(
    tmp_path, own_slo, slo, aborted, base, spec, label
):
    runs, serving = _goodput(tmp_path, own_slo, slo, aborted)
    np.testing.assert_allclose(runs.loc[[0, 2], "goodput"], [base, spec])
    assert list(runs["slo"]) == [label, label]
    np.testing.assert_allclose(serving.loc[[0, 2], "goodput"], [base, spec])
    assert list(serving["slo"]) == [label, label]


def test_runs_recorded_before_backends_existed_read_as_offline_closed_loop(hand):
    r, t = hand
    assert set(r.requests["backend"]) == {"offline"} and set(r.requests["request_rate"]) == {0.0}
    assert set(t["backend"]) == {"offline"} and set(t["request_rate"]) == {0.0}


def test_the_counters_a_pools_only_the_runs_whose_counters_cover_every_request(tmp_path):
    """An instance's counters lost to a later engine leave a run's counters short of its
    requests' drafts: such a run is left out of a (vLLM counters), not pooled as if whole."""
    v = V["cot_sd"]
    jobs = [run_fixtures.Job("f", v, "synth_easy", "easy", k, n_problems=40) for k in (1, 3)]
    paths = [tmp_path / "f" / j.name / results.SUMMARY for j in jobs]
    for j in jobs:
        run_fixtures.write_job(tmp_path, j)
    whole, short = (json.loads(p.read_text()) for p in paths)
    spec = short["spec"]  # the first position's counts only: a partial, skewed count
    spec["num_draft_tokens"] //= 2
    spec["accepted_per_pos"] = [spec["accepted_per_pos"][0], 0, 0]
    paths[1].write_text(json.dumps(short))
    t = tables.build_tables(load.load(tmp_path), n_boot=50)
    both = [whole["spec"], spec]
    expected = theory.alpha_mle([whole["spec"]["accepted_per_pos"]], [whole["spec"]["num_drafts"]])
    pooled = theory.alpha_mle(
        [s["accepted_per_pos"] for s in both], [s["num_drafts"] for s in both]
    )
    assert pooled != pytest.approx(expected)  # pooling the short run would move it
    assert t.fits.iloc[0]["alpha_vllm"] == pytest.approx(expected)
