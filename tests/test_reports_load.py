"""Loading stored runs: every complete run read, partial and corrupt ones listed and skipped."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from harness import results as harness_results
from reports import load
from tests import run_fixtures

N = 20


@pytest.fixture
def results(tmp_path):
    """Two sweeps of synthetic runs: 'a' (base and cot_sd at K=2) and 'b' (cot)."""
    v = {x.name: x for x in run_fixtures.SEED_STUDY}
    jobs = [
        run_fixtures.Job("a", v["base"], "synth_easy", "easy", 0, n_problems=N),
        run_fixtures.Job("a", v["cot_sd"], "synth_easy", "easy", 2, n_problems=N, detailed=True),
        run_fixtures.Job("b", v["cot"], "synth_hard", "hard", 0, n_problems=N),
    ]
    dirs = [run_fixtures.write_job(tmp_path, j) for j in jobs]
    return tmp_path, dirs


def test_every_complete_run_is_loaded_into_tidy_tables(results):
    root, _ = results
    r = load.load(root)
    assert r.skipped == ()
    assert len(r.runs) == 3 and len(r.requests) == 3 * N
    assert set(r.requests["sweep_id"]) == {"a", "b"}
    assert "output_token_ids" not in r.requests  # the big column stays on disk
    assert set(r.requests["draft"]) == {"none", "models/synthetic/draft_cot"}
    assert set(r.requests["target_role"]) == {"base", "cot"}  # from the config, not the path
    assert r.requests["correct"].dtype == float
    spec = r.runs.set_index("variant").loc["cot_sd"]
    assert spec["spec_accepted_per_pos"] is not None and len(spec["spec_accepted_per_pos"]) == 2
    assert spec["hardware_cpu_count"] == 2 and spec["versions_vllm"] == "synthetic"


def test_named_sweeps_only(results):
    root, _ = results
    r = load.load(root, ["b"])
    assert set(r.requests["sweep_id"]) == {"b"} and len(r.runs) == 1


def test_unknown_sweep_is_one_clear_error(results):
    root, _ = results
    with pytest.raises(ValueError, match=r"sweep 'nope' not found.*sweeps: a, b"):
        load.load(root, ["nope"])


def test_missing_results_dir_loads_nothing(tmp_path):
    r = load.load(tmp_path / "absent")
    assert r.requests.empty and r.runs.empty and r.skipped == ()


def _break(job_dir, how):
    summary = job_dir / harness_results.SUMMARY
    requests = job_dir / harness_results.REQUESTS
    if how == "no summary":
        summary.unlink()
    elif how == "not complete":
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "complete": False}))
    elif how == "corrupt summary":
        summary.write_text('{"complete": tr')
    elif how == "no requests":
        requests.unlink()
    elif how == "corrupt requests":
        requests.write_bytes(b"PAR1 not really parquet")
    elif how == "missing column":  # a run of an older schema
        pq.write_table(pq.read_table(requests).drop_columns(["tpot_s"]), requests)
        run_fixtures.as_before_digests(job_dir)
    elif how == "short":
        pq.write_table(pq.read_table(requests).slice(0, N - 1), requests)
    elif how == "zeroed middle":
        run_fixtures.zero_middle(requests)
    elif how == "zeroed middle, no digest":
        run_fixtures.zero_middle(requests)
        run_fixtures.as_before_digests(job_dir)


REASONS = {
    "no summary": "partial: no summary.json",
    "not complete": "partial: summary.json is not marked complete",
    "corrupt summary": "corrupt summary.json",
    "no requests": "no requests.parquet",
    "corrupt requests": "corrupt requests.parquet",
    "missing column": "requests.parquet lacks columns: tpot_s",
    "short": f"{N - 1} request rows but summary.json says {N}",
    "zeroed middle": "corrupt requests.parquet: its sha256 is not the one summary.json records",
    "zeroed middle, no digest": "corrupt requests.parquet: Couldn't deserialize thrift",
}


@pytest.mark.parametrize("how", list(REASONS))
def test_partial_or_corrupt_run_is_skipped_with_its_reason(results, how):
    root, dirs = results
    _break(dirs[1], how)
    r = load.load(root)
    assert [s.path for s in r.skipped] == [str(dirs[1])]
    assert r.skipped[0].reason.startswith(REASONS[how])
    assert len(r.runs) == 2 and len(r.requests) == 2 * N
    # the harness's one completeness check agrees, but for a column only the report needs
    assert (harness_results.read_summary(dirs[1]) is None) == (how != "missing column")


def test_a_run_without_a_digest_that_reads_back_whole_is_loaded(results):
    root, dirs = results
    run_fixtures.as_before_digests(dirs[1])
    r = load.load(root)
    assert r.skipped == () and len(r.runs) == 3 and len(r.requests) == 3 * N
    digests = r.runs.set_index("variant")[harness_results.REQUESTS_SHA256]
    assert digests.isna().to_dict() == {"base": False, "cot_sd": True, "cot": False}


def test_hidden_temp_dirs_are_ignored_and_failed_jobs_listed(results):
    root, _ = results
    (root / "a" / ".tmp-job-123").mkdir()
    (root / "a" / "failures.jsonl").write_text(
        json.dumps({"job": "gone", "error": "RuntimeError: boom"}) + "\nnot json\n"
        + json.dumps({"job": "base-synth_easy-k0-c1-s0", "error": "old failure"}) + "\n"
    )  # fmt: skip
    r = load.load(root)
    assert [(s.path, s.reason) for s in r.skipped] == [
        (str(root / "a" / "gone"), "failed: RuntimeError: boom")
    ]  # a job that failed once and then completed is not listed
    assert len(r.runs) == 3


def test_optional_columns_missing_from_older_files_become_null(results):
    root, dirs = results
    path = dirs[0] / harness_results.REQUESTS
    pq.write_table(pq.read_table(path).drop_columns(["rejection_tokens", "extractor"]), path)
    run_fixtures.as_before_digests(dirs[0])
    r = load.load(root)
    assert r.skipped == ()
    base = r.requests[r.requests["variant"] == "base"]
    assert base["rejection_tokens"].isna().all() and base["extractor"].isna().all()
