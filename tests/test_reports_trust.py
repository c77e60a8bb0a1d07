"""Numbers you can trust: paired statistics, problem sets, losses, latency percentiles,
answer extraction, hardware, repeats and verdicts that can say no (runs with known numbers)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from reports import aggregate, hypotheses, load, markdown, sentinel, theory
from reports.report import make_report
from tests import run_fixtures

V = {v.name: v for v in run_fixtures.SEED_STUDY}


def _job(variant: str, k: int, n: int = 4, **kw) -> run_fixtures.Job:
    return run_fixtures.Job("t", V[variant], "synth_easy", "easy", k, n_problems=n, **kw)


def _patch_summary(job_dir: Path, **fields) -> None:
    path = job_dir / "summary.json"
    summary = json.loads(path.read_text())
    for key, value in fields.items():
        summary[key] = {**summary[key], **value} if isinstance(value, dict) else value
    path.write_text(json.dumps(summary))


def _table(root: Path):
    r = load.load(root)
    return r, aggregate.aggregate(
        r.requests, aggregate.with_lossless(r.requests, r.runs), n_boot=100
    )


@pytest.fixture
def paired(tmp_path):
    """cot K=0 on 4 problems; cot_sd K=2 answered 3 (one missing, one failed of 4 sent):
    on the shared problems the TPOT speedup is exactly 2."""
    base, spec = _job("cot", 0), _job("cot_sd", 2)
    run_fixtures.write_job(tmp_path, base, run_fixtures.with_columns(
        run_fixtures.records(base), tpot_s=[0.02, 0.02, 0.02, 1.0]))  # fmt: skip
    recs = run_fixtures.with_columns(
        run_fixtures.records(spec), tpot_s=[0.01, 0.01, 5.0, 0.01],
        finish_reason=["stop", "stop", "abort", "stop"],
    )[:3]  # fmt: skip
    run_fixtures.write_job(tmp_path, spec, recs)
    return tmp_path


def test_speedup_is_paired_on_the_problems_both_answered(paired):
    _, t = _table(paired)
    spec = t.set_index("k").loc[2]
    # problems 0 and 1 only: 3 is missing, 2 failed; the union would give 0.27 / 0.01 / 3
    assert spec["speedup_tpot"] == pytest.approx(2.0)
    assert spec["n_requests"] == 2


@pytest.mark.usefixtures("unrasterized")
def test_missing_and_failed_requests_are_counted(paired, tmp_path):
    _, t = _table(paired)
    counts = t.set_index("k")[["num_missing", "num_failed"]]
    assert counts.loc[2].tolist() == [1, 1] and counts.loc[0].tolist() == [0, 0]
    text = make_report(paired, tmp_path / "out", n_boot=50).read_text()
    assert "| missing / failed |" in text and "| 1 / 1 |" in text
    assert "1 problem(s) missing and 1 request(s) failed" in text


def test_runs_with_other_problem_sets_never_pool(tmp_path):
    for seed, digest in ((0, "aaaa"), (1, "bbbb")):
        out = run_fixtures.write_job(tmp_path, _job("cot", 0, seed=seed))
        _patch_summary(out, dataset_digest=digest, config={"limit": 4})
    _, t = _table(tmp_path)
    assert len(t) == 2 and set(t["dataset_digest"]) == {"aaaa", "bbbb"}
    assert (t["n_runs"] == 1).all() and (t["limit"] == 4).all()


def test_latency_percentiles_truncation_and_extractors(tmp_path):
    job = _job("cot", 0, n=5)
    recs = run_fixtures.with_columns(
        run_fixtures.records(job),
        ttft_s=[0.1, 0.2, 0.3, 0.4, 0.5], tpot_s=[0.01, 0.02, 0.03, 0.04, 0.05],
        output_tokens=[2, 2, 2, 2, 101], e2e_s=[1.0, 2.0, 3.0, 4.0, 5.0],
        finish_reason=["stop", "length", "length", "stop", "stop"],
        extractor=["hash", "last_number", "hash", "none", "hash"],
        correct=[True, True, True, False, True],
    )  # fmt: skip
    run_fixtures.write_job(tmp_path, job, recs)
    _, t = _table(tmp_path)
    row = t.iloc[0]
    assert row["ttft_p50_s"] == pytest.approx(0.3) and row["tpot_p50_s"] == pytest.approx(0.03)
    assert row["e2e_p90_s"] == pytest.approx(4.6) and row["e2e_p99_s"] == pytest.approx(4.96)
    # ITL over gaps: 1 + 1 + 1 + 1 + 100 gaps, so the last request dominates
    assert row["itl_s"] == pytest.approx((0.01 + 0.02 + 0.03 + 0.04 + 5.0) / 104)
    assert row["itl_p50_s"] == pytest.approx(0.05) and row["itl_p99_s"] == pytest.approx(0.05)
    assert row["truncation_rate"] == pytest.approx(0.4)
    assert row["extractor_share_hash"] == pytest.approx(0.6)
    assert row["extractor_share_last_number"] == pytest.approx(0.2)
    assert row["extractor_share_none"] == pytest.approx(0.2)
    assert row["n_truncated_fallback_correct"] == 1  # the 2nd: cut off, found by last number


@pytest.mark.usefixtures("unrasterized")
def test_no_speedup_across_hardware_and_a_note_across_versions(tmp_path):
    base = run_fixtures.write_job(tmp_path, _job("cot", 0, n=10))
    run_fixtures.write_job(tmp_path, _job("cot_sd", 2, n=10))
    _patch_summary(base, hardware={"cpu": "Other CPU"})
    _, t = _table(tmp_path)
    spec = t.set_index("k").loc[2]
    assert np.isnan(spec["speedup_tpot"]) and np.isnan(spec["speedup_e2e"])
    assert "baseline on Other CPU / no GPU, this on synthetic / no GPU" in spec["speedup_note"]
    text = make_report(tmp_path, tmp_path / "out", n_boot=50).read_text()
    assert "## Provenance" in text and "Other CPU" in text
    assert "differ in hardware" in text
    _patch_summary(base, hardware={"cpu": "synthetic"}, versions={"vllm": "0.0.1"})
    _, t = _table(tmp_path)
    spec = t.set_index("k").loc[2]
    assert spec["speedup_tpot"] > 1 and "other versions" in spec["speedup_note"]


@pytest.mark.usefixtures("unrasterized")
def test_repeats_show_median_and_range_of_each_speedup_and_acceptance(tmp_path):
    for seed, speed in ((0, 1.0), (1, 1.3), (2, 0.8)):  # the machine drifts between repeats
        for v, k in (("cot", 0), ("cot_sd", 2)):
            job = _job(v, k, n=30, seed=seed, pairing="interleaved", speed=speed)
            run_fixtures.write_job(tmp_path, job)
    _, t = _table(tmp_path)
    spec = t.set_index("k").loc[2]
    assert spec["n_repeats"] == 3
    for name in aggregate.SPEEDUPS:
        low, mid, high = (spec[f"{name}_repeat_{s}"] for s in ("min", "median", "max"))
        assert 1 < low < mid < high
    assert 0 < spec["acceptance_rate_repeat_std"] < 0.1
    assert spec["reference_spread"] == pytest.approx(1.3 / 0.8 - 1)
    text = make_report(tmp_path, tmp_path / "out", n_boot=50).read_text()
    assert "## Repeats" in text
    assert f"drift sentinel differs by {1.3 / 0.8 - 1:.1%} across its runs" in text


@pytest.mark.usefixtures("unrasterized")
def test_interleaved_speedups_pair_each_request_with_its_own_baseline(tmp_path):
    """The K = 0 run ran on a machine 1.5x slower: the sequential speedup takes the drift
    for speculation, the interleaved one (its pairs ran beside it) does not."""
    truth = theory.expected_tokens(V["cot_sd"].alpha, 2) / (2 * V["cot_sd"].cost + 1)
    run_fixtures.write_job(tmp_path, _job("cot", 0, n=60, speed=1.5, pairing="interleaved"))
    for pairing in ("sequential", "interleaved"):
        job = _job("cot_sd", 2, n=60, pairing=pairing, within=1.25)
        run_fixtures.write_job(tmp_path / pairing, job)
        for other in (tmp_path / "t").iterdir():  # the same K = 0 run for both
            target = tmp_path / pairing / "t" / other.name
            if not target.exists():
                target.symlink_to(other)
    rows = {}
    for pairing in ("sequential", "interleaved"):
        _, t = _table(tmp_path / pairing)
        rows[pairing] = t[t["pairing"] == pairing].set_index("k").loc[2]
        aa = t[t["k"] == 0].iloc[0]
        assert aa["pairing"] == "interleaved" and abs(aa["speedup_tpot"] - 1) < 0.05  # A/A
    assert rows["sequential"]["speedup_tpot"] == pytest.approx(1.5 * truth, rel=0.08)
    paired = rows["interleaved"]
    assert paired["speedup_tpot_lo"] < truth < paired["speedup_tpot_hi"]
    assert paired["baseline_tpot_s"] == pytest.approx(run_fixtures.TARGET_TPOT_S, rel=0.05)
    assert paired["lossless_fraction"] == 1.0 and paired["reference_drift"] == pytest.approx(0.25)
    # the sentinel on the plain target: 1.0 here against the median of 1.5 and 1.0
    assert paired["reference_shift"] == pytest.approx(1 / 1.25 - 1)
    assert np.isnan(rows["sequential"]["reference_shift"])  # timed on its own engine
    text = make_report(tmp_path / "interleaved", tmp_path / "out", n_boot=50).read_text()
    assert "| interleaved |" in text and "moved +25.0% within a run (more than 20%)" in text
    assert "read -20.0% against the sweep's median" in text


def test_speculation_is_refuted_when_no_k_beats_k0(tmp_path):
    slow = run_fixtures.Variant("cot_sd", "cot", "cot", "cot", 0.7, 200, alpha=0.1, cost=0.9)
    run_fixtures.write_job(tmp_path, _job("cot", 0, n=200))
    for k in (1, 3):
        job = run_fixtures.Job("t", slow, "synth_easy", "easy", k, n_problems=200)
        run_fixtures.write_job(tmp_path, job)
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=100) if v.hypothesis == 2]
    assert v.verdict == "refuted" and v.evidence.startswith("no K beats K=0: best K=1")
    assert "held-out half" in v.evidence and "TPOT speedup 0." in v.evidence


def test_best_k_is_chosen_on_one_half_and_judged_on_the_other(tmp_path):
    run_fixtures.write_job(tmp_path, _job("cot", 0, n=100))
    for k in (1, 3):
        run_fixtures.write_job(tmp_path, _job("cot_sd", k, n=100))
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=100) if v.hypothesis == 2]
    ids = r.requests.loc[r.requests["k"] == 0, "problem_id"]
    held_out = ids[hypotheses.half(ids) == 1]
    y = r.requests[(r.requests["k"] == 3) & r.requests["problem_id"].isin(held_out)]
    x = r.requests[(r.requests["k"] == 0) & r.requests["problem_id"].isin(held_out)]
    expected = x["tpot_s"].mean() / y["tpot_s"].mean()
    assert f"TPOT speedup {expected:.2f} [" in v.evidence and "best K=3" in v.evidence
    assert "(sequential: no A/A floor)" in v.evidence and v.verdict == "supported"


@pytest.mark.parametrize("aa", [1.0, 1.06])
def test_a_speedup_inside_the_noise_floor_is_no_detectable_effect(tmp_path, aa):
    """A 4% speedup, measured tightly: supported when the A/A check reads 1.00, "no
    detectable effect" when the same engine twice differs by 6%."""
    slight = dataclasses.replace(V["cot_sd"], alpha=0.2, cost=0.15)
    base = _job("cot", 0, n=200, pairing="interleaved")
    recs = run_fixtures.records(base)
    run_fixtures.write_job(tmp_path, base, run_fixtures.with_columns(
        recs, pair_tpot_s=[r.tpot_s * aa for r in recs]))  # fmt: skip
    spec = run_fixtures.Job("t", slight, "synth_easy", "easy", 1, n_problems=200,
                            pairing="interleaved")  # fmt: skip
    run_fixtures.write_job(tmp_path, spec)
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=200) if v.hypothesis == 2]
    assert v.verdict == ("supported" if aa == 1.0 else hypotheses.NO_EFFECT), v.evidence
    assert ("A/A 1.060" in v.evidence) == (aa != 1.0)


def _plain(name: str, accuracy: float, tokens: float) -> run_fixtures.Variant:
    return run_fixtures.Variant(name, name, None, name, accuracy, tokens)


@pytest.mark.parametrize("accuracy", [0.0, 1.0])
def test_accuracy_without_room_to_differ_is_untestable(tmp_path, accuracy):
    """Every side at accuracy 0 (or 1): fine-tuning and CoD's accuracy cannot be compared;
    a CoD that writes more tokens is refuted all the same, on the side that can be."""
    for sweep, cod_tokens in (("shorter", 80), ("longer", 300)):
        for v in (_plain("base", accuracy, 40), _plain("cot", accuracy, 200),
                  _plain("cod", accuracy, cod_tokens)):  # fmt: skip
            run_fixtures.write_job(tmp_path, run_fixtures.Job(sweep, v, "synth_easy", "easy", 0,
                                                              n_problems=60))  # fmt: skip
    r, t = _table(tmp_path)
    verdicts = hypotheses.judge(r.requests, t, n_boot=100)
    why = f"untestable: accuracy {accuracy:.0f} on both sides (no room to differ)"
    assert {v.hypothesis for v in verdicts} == {1, 3} and all(why in v.evidence for v in verdicts)
    by = {(v.hypothesis, v.sweep_id): v.verdict for v in verdicts if v.comparison != "cod vs base"}
    assert by == {(1, "shorter"): hypotheses.UNTESTABLE, (1, "longer"): hypotheses.UNTESTABLE,
                  (3, "shorter"): hypotheses.UNTESTABLE, (3, "longer"): "refuted"}  # fmt: skip


@pytest.mark.parametrize("cut", [0.3, 0.1, None])
def test_a_side_cut_at_the_token_limit_beyond_the_limit_is_untestable(tmp_path, cut):
    """30% of CoT's answers cut at the token limit: CoD vs CoT cannot be compared; 10% can,
    and so can runs recorded before the finish reason was (None)."""
    cot = _job("cot", 0, n=100)
    cod = run_fixtures.Job("t", _plain("cod", 0.7, 80), "synth_easy", "easy", 0, n_problems=100)
    n_cut = round((cut or 0) * 100)
    for job, finish in (
        (cot, ["length"] * n_cut + ["stop"] * (100 - n_cut)),
        (cod, ["stop"] * 100),
    ):
        recs = run_fixtures.records(job)
        finish = finish if cut is not None else [None] * 100
        run_fixtures.write_job(tmp_path, job, run_fixtures.with_columns(recs, finish_reason=finish))
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=100) if v.hypothesis == 3]
    limited = cut is not None and cut > hypotheses.MAX_CUT
    assert (v.verdict == hypotheses.UNTESTABLE) == limited, v.evidence
    assert ("30% of cot answers cut at the token limit" in v.evidence) == limited


@pytest.mark.parametrize("baseline", ["interleaved", "sequential", None])
def test_an_interleaved_speedup_without_its_a_a_is_untestable(tmp_path, baseline):
    """cot_sd K=1 interleaved: judged against the A/A floor of its target's interleaved
    K = 0 row; untestable with only a sequential K = 0 run of it, or none, in the sweep."""
    if baseline:
        run_fixtures.write_job(tmp_path, _job("cot", 0, n=100, pairing=baseline))
    run_fixtures.write_job(tmp_path, _job("cot_sd", 1, n=100, pairing="interleaved"))
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=100) if v.hypothesis == 2]
    if baseline == "interleaved":
        assert v.verdict == "supported" and "widened by A/A" in v.evidence, v.evidence
    else:
        assert v.verdict == hypotheses.UNTESTABLE, v.evidence
        assert v.evidence.endswith("untestable: no A/A in this sweep")


def test_the_overall_verdict_is_read_from_the_comparisons_that_can_be_judged():
    def section(*verdicts: str) -> str:
        found = [hypotheses.Verdict(3, "s", "d", f"c{i}", "e", v) for i, v in enumerate(verdicts)]
        return "\n".join(markdown._hypotheses(tuple(found)))

    assert "**Verdict: supported** (2 untestable, 1 supported of 3 comparisons)" in section(
        hypotheses.UNTESTABLE, "supported", hypotheses.UNTESTABLE)  # fmt: skip
    assert "**Verdict: untestable** (1 untestable of 1 comparisons)" in section(
        hypotheses.UNTESTABLE)  # fmt: skip
    assert "**Verdict: mixed**" in section("supported", "refuted", hypotheses.UNTESTABLE)


@pytest.mark.parametrize("lossless", [True, False])
def test_a_lossless_speedup_is_judged_at_accuracy_0_and_a_lossy_one_is_not(tmp_path, lossless):
    """Accuracy 0 on both sides: a speculator whose outputs equal K = 0's loses nothing by
    identity and its speedup is judged; one whose outputs differ cannot show it lost none."""
    for job in (_job("cot", 0, n=100), _job("cot_sd", 3, n=100)):
        recs = run_fixtures.records(job)
        hashes = [r.output_hash if lossless or not job.k else f"x{i}" for i, r in enumerate(recs)]
        wrong = [False] * len(recs)
        run_fixtures.write_job(
            tmp_path, job, run_fixtures.with_columns(recs, correct=wrong, output_hash=hashes)
        )
    r, t = _table(tmp_path)
    (v,) = [v for v in hypotheses.judge(r.requests, t, n_boot=100) if v.hypothesis == 2]
    assert (v.verdict == "supported") == lossless, v.evidence
    assert ("outputs identical to K=0's" in v.evidence) == lossless
    assert ("untestable: accuracy 0 on both sides" in v.evidence) == (not lossless)


@pytest.mark.parametrize("within", [1.1, 1.3])
def test_an_interleaved_rows_interval_is_widened_only_past_its_wider_drift(tmp_path, within):
    """10% within an interleaved run is noise its pairs cancel; 30% widens the verdict."""
    run_fixtures.write_job(tmp_path, _job("cot", 0, n=20, pairing="interleaved"))
    run_fixtures.write_job(tmp_path, _job("cot_sd", 2, n=20, pairing="interleaved", within=within))
    _, t = _table(tmp_path)
    low, high, said = hypotheses.noise_floor(t, t.set_index("k").loc[2])
    widened = within > 1 + sentinel.DRIFT_INTERLEAVED
    assert ("sentinel drift 30.0%" in said) == widened
    assert (high >= within) == widened and low * high == pytest.approx(1.0)
