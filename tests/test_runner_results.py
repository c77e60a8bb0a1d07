"""Records, job names, config hashes and atomic results on disk (no engine)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import results
from harness.config import compose_config
from harness.files import file_digest, json_digest
from harness.metrics import SpecCounts, output_hash
from harness.records import JobInfo, RequestRecord, RunSummary
from tests import run_fixtures

COLUMNS = results.request_schema().names  # derived from JobInfo + RequestRecord
SPEC_COLUMNS = COLUMNS[COLUMNS.index("num_spec_steps") : COLUMNS.index("output_hash")]
SUMMARY_KEYS = {
    *("sweep_id", "run_id", "complete", "experiment", "variant", "target", "draft", "k"),
    *("dataset", "difficulty", "prompt_style", "concurrency", "seed", "temperature"),
    *("config", "config_hash", "versions", "hardware", "engine_start_s", "engine_reused"),
    *("engine_launches", "wall_s", "num_requests", "output_tokens", "output_tokens_per_s"),
    *("spec", "counter_mismatch", "spec_requests", "repeat", "method", "draft_sample_method"),
    *("pairing", "reference", "backend", "request_rate", "k_schedule", "request_throughput"),
    *("instances", "synthetic_acceptance_length", "phases_s"),
    *("run_key", "models", "dataset_digest", "git", "command"),  # provenance
}


def _job(k: int = 2, **changes) -> JobInfo:
    job = JobInfo("s", f"cot_sd-synth_easy-k{k}", "tiny", "cot_sd", "models/t", "models/d", k,
                  "synth_easy", "easy", "cot", 0.0, 0, 1)  # fmt: skip
    return dataclasses.replace(job, **changes)


def _record(job: JobInfo, problem_id: str = "p1", ids=(5, 6, 7)) -> RequestRecord:
    spec = job.k > 0
    return RequestRecord(
        job, problem_id, 10, len(ids), "stop", "7", "7", True, "hash", 0.1, 0.3, 0.1,
        num_spec_steps=1 if spec else None, num_draft_tokens=2 if spec else None,
        num_accepted_tokens=1 if spec else None, acceptance_rate=0.5 if spec else None,
        mean_acceptance_length=2.0 if spec else None,
        acceptance_histogram=(0, 1, 0) if spec else None, output_hash=output_hash(ids),
        output_token_ids=tuple(ids), rejection_tokens=("x",) if spec else None,
    )  # fmt: skip


def _summary(job: JobInfo, config_hash: str = "h", max_tokens: int = 24) -> RunSummary:
    return RunSummary(
        job, {"max_tokens": max_tokens}, config_hash, {"vllm": "0"}, {"device": "cpu"}, 1.0,
        False, 1, 2.0, 1, 3, 1.5, SpecCounts(1, 2, 1, (1, 0)) if job.k else None, None,
    )  # fmt: skip


def test_request_row_and_schema_follow_the_record_fields_in_order():
    names = [f.name for f in dataclasses.fields(JobInfo)]
    names += [f.name for f in dataclasses.fields(RequestRecord) if f.name != "job"]
    assert list(_record(_job()).to_row()) == COLUMNS == names
    schema = results.request_schema()
    assert schema.field("k").type == pa.int64() and schema.field("draft").type == pa.string()
    assert schema.field("correct").type == pa.bool_()
    assert schema.field("tpot_s").type == pa.float64()
    assert schema.field("acceptance_histogram").type == pa.list_(pa.int64())
    assert schema.field("rejection_tokens").type == pa.list_(pa.string())


def test_k0_rows_have_no_spec_fields():
    row = _record(_job(k=0, draft=None)).to_row()
    assert all(row[c] is None for c in [*SPEC_COLUMNS, "rejection_tokens"])


def test_summary_row_has_the_contract_keys_and_is_complete():
    row = _summary(_job()).to_row()
    assert set(row) == SUMMARY_KEYS
    assert row["complete"] is True
    assert row["spec"]["acceptance_rate"] == 0.5
    assert _summary(_job(k=0)).to_row()["spec"] is None


def test_job_name_is_readable_and_names_every_job_axis():
    cfg = compose_config(["variant=cot_sd", "dataset=synth_hard", "spec.k=3", "limit=20"])
    assert results.job_name(cfg) == "cot_sd-synth_hard-k3-c1-s0-t0-n20"
    cfg = compose_config(["temperature=0.7", "concurrency=4", "seed=2", "limit=null"])
    assert results.job_name(cfg) == "base-synth_easy-k0-c4-s2-t0.7-nall"
    assert results.job_name(compose_config(["seed=3", "repeat=2", "limit=5"])).endswith(
        "-s3-t0-n5-r2"
    )
    served = compose_config(["backend=server", "request_rate=2.5", "concurrency=8", "limit=5"])
    assert results.job_name(served) == "base-synth_easy-k0-c8-server-rps2.5-s0-t0-n5"
    windowed = compose_config(
        ["backend=server", "request_rate=2", "concurrency=8", "pair_window=16"]
    )
    assert results.job_name(windowed) == "base-synth_easy-k0-c8-server-rps2-w16-s0-t0-n30"


def test_config_hash_ignores_where_results_go_force_and_the_slo_but_not_the_job():
    base = results.config_hash(compose_config([]))
    assert results.config_hash(compose_config(["results_dir=elsewhere", "force=true"])) == base
    assert results.config_hash(compose_config(["slo.tpot_ms=30"])) == base  # the report's
    assert results.config_hash(compose_config(["max_tokens=7"])) != base


def test_a_key_added_later_keeps_a_stored_runs_hash_until_it_is_set():
    """A run stored before ``pair_window`` existed hashes as one that leaves it at null."""
    config = results.resolved_config(compose_config([]))
    stored = {k: v for k, v in config.items() if k != "pair_window"}
    assert "pair_window" in config and results.config_digest(stored) == results.config_digest(
        config
    )
    assert results.config_hash(compose_config(["pair_window=4"])) != results.config_digest(stored)


def test_a_nested_key_added_later_keeps_a_stored_runs_hash_at_its_default_only():
    """A GPU run stored before ``engine.multiprocessing`` existed ran as ``true`` does; a CPU
    run now runs its engines in the harness's process (``false``): another hash."""
    gpu = results.resolved_config(compose_config(["engine=cuda"]))
    stored = {**gpu, "engine": {k: v for k, v in gpu["engine"].items() if k != "multiprocessing"}}
    assert gpu["engine"]["multiprocessing"] is True
    assert results.config_digest(stored) == results.config_digest(gpu)
    assert "multiprocessing" in gpu["engine"]  # the caller's config is left as it was
    cpu = results.resolved_config(compose_config([]))
    stored = {**cpu, "engine": {k: v for k, v in cpu["engine"].items() if k != "multiprocessing"}}
    assert cpu["engine"]["multiprocessing"] is False
    assert results.config_digest(stored) != results.config_digest(cpu)


def test_written_job_is_done_only_for_its_run_key(tmp_path):
    job_dir = tmp_path / "s" / "job"
    job = _job()
    summary = _summary(job, "abc")
    summary = dataclasses.replace(summary, num_requests=2, run_key={"problems": "p"})
    results.write_job(job_dir, [_record(job), _record(job, "p2")], summary)
    assert results.changed_parts(job_dir, {"problems": "p"}) == []
    assert results.changed_parts(job_dir, {"problems": "q"}) == ["problems"]
    table = pq.read_table(job_dir / results.REQUESTS)
    assert table.column_names == COLUMNS and table.num_rows == 2
    stored = json.loads((job_dir / results.SUMMARY).read_text())
    assert stored["config_hash"] == "abc"
    assert stored[results.REQUESTS_SHA256] == file_digest(job_dir / results.REQUESTS, None)


def test_rewriting_a_job_replaces_it_and_leaves_no_temp_dirs(tmp_path):
    job_dir, job = tmp_path / "s" / "job", _job()
    results.write_job(job_dir, [_record(job)], _summary(job, "one"))
    results.write_job(job_dir, [_record(job)], _summary(job, "two"))
    assert results.complete_summary(job_dir)["config_hash"] == "two"
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["job"]


def test_a_dir_without_a_complete_summary_is_partial(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / results.SUMMARY).write_text('{"complete": false}')
    assert results.read_summary(tmp_path / "job") is None


def _drop_digest(job_dir):
    summary = json.loads((job_dir / results.SUMMARY).read_text())
    del summary[results.REQUESTS_SHA256]
    (job_dir / results.SUMMARY).write_text(json.dumps(summary))


@pytest.mark.parametrize(
    "damage",
    [
        lambda job_dir: (job_dir / results.REQUESTS).write_bytes(
            (job_dir / results.REQUESTS).read_bytes()[:100]  # truncated
        ),
        lambda job_dir: (job_dir / results.REQUESTS).unlink(),
        lambda job_dir: (job_dir / results.SUMMARY).write_bytes(b"\xff\xfe"),  # not UTF-8
        lambda job_dir: (job_dir / results.SUMMARY).write_text("[1]"),  # not an object
        lambda job_dir: results.write_job(  # the table of another run: one row, not two
            job_dir, [_record(_job())], dataclasses.replace(_summary(_job()), num_requests=2)
        ),
        lambda job_dir: run_fixtures.zero_middle(job_dir / results.REQUESTS),  # footer intact
        lambda job_dir: (  # the same, in a summary written before digests: read in full
            run_fixtures.zero_middle(job_dir / results.REQUESTS),
            _drop_digest(job_dir),
        ),
    ],
)
def test_a_result_that_does_not_read_back_is_not_complete(tmp_path, damage):
    job_dir, job = tmp_path / "s" / "job", _job()
    summary = dataclasses.replace(_summary(job, "abc"), num_requests=2)
    results.write_job(job_dir, [_record(job), _record(job, "p2")], summary)
    assert results.read_summary(job_dir) is not None
    damage(job_dir)
    assert results.read_summary(job_dir) is None


def test_a_summary_without_a_digest_is_complete_when_its_table_reads_back(tmp_path):
    job_dir, job = tmp_path / "s" / "job", _job()
    summary = dataclasses.replace(_summary(job, "abc"), num_requests=2)
    results.write_job(job_dir, [_record(job), _record(job, "p2")], summary)
    _drop_digest(job_dir)
    assert results.complete_summary(job_dir)["config_hash"] == "abc"
    with pytest.raises(results.IncompleteRun, match=r"partial: no summary\.json"):
        results.complete_summary(tmp_path / "s" / "absent")


def test_a_job_whose_table_was_zeroed_in_the_middle_runs_again(tmp_path, monkeypatch, capsys):
    """The footer still holds the right row count; the bytes are not the ones written, so
    the harness runs the job again instead of skipping it."""
    from harness.sweep import job as jobs

    cfg = compose_config([f"results_dir={tmp_path}"])
    job_dir = results.sweep_dir(cfg) / results.job_name(cfg)
    key = {"models": "m", "problems": "p"}
    job = _job()
    summary = dataclasses.replace(_summary(job, "abc"), num_requests=40, run_key=key)
    results.write_job(job_dir, [_record(job, f"p{i}") for i in range(40)], summary)

    class Ran(Exception):
        pass

    def run_it(*args):
        raise Ran

    monkeypatch.setattr(jobs, "prepare", lambda cfg: None)
    monkeypatch.setattr(jobs, "models_used", lambda cfg, job: {})
    monkeypatch.setattr(jobs, "run_key", lambda cfg, job, models: key)
    monkeypatch.setattr(jobs, "measure", run_it)
    assert jobs.run_job(cfg, progress=False) is None  # complete, same run key: skipped
    assert "skip" in capsys.readouterr().out

    run_fixtures.zero_middle(job_dir / results.REQUESTS)
    assert pq.read_metadata(job_dir / results.REQUESTS).num_rows == 40
    with pytest.raises(results.IncompleteRun, match=r"corrupt requests\.parquet: its sha256"):
        results.complete_summary(job_dir)
    assert results.changed_parts(job_dir, key) is None
    with pytest.raises(Ran):
        jobs.run_job(cfg, progress=False)
    assert "re-running" in capsys.readouterr().out


def test_failures_are_appended_one_json_line_each(tmp_path):
    results.append_failure(tmp_path, "job-a", "h1", RuntimeError("engine died"))
    results.append_failure(tmp_path, "job-b", "h2", ValueError("bad"))
    lines = [json.loads(x) for x in (tmp_path / results.FAILURES).read_text().splitlines()]
    assert [x["job"] for x in lines] == ["job-a", "job-b"]
    assert lines[0]["error"] == "RuntimeError: engine died"


def test_a_failure_that_could_not_be_recorded_is_not_pointed_to(tmp_path, monkeypatch, capsys):
    from harness.sweep import job as jobs

    blocker = tmp_path / "file"  # results_dir: neither the results nor failures.jsonl fit
    blocker.write_text("")
    cfg = compose_config(["variant=cot", f"results_dir={blocker}"])

    def died(*args: object) -> None:
        raise RuntimeError("engine died")

    monkeypatch.setattr(jobs, "run_job", died)
    assert jobs.run_one(cfg, keep_going=True) == jobs.FAILED
    lost, failed = capsys.readouterr().err.splitlines()
    assert lost.startswith(f"job {results.job_name(cfg)}: could not record its failure in ")
    assert failed == f"job {results.job_name(cfg)} failed (RuntimeError: engine died)"


def test_a_full_disk_stops_a_multirun_at_its_job_without_a_failure_line(
    tmp_path, monkeypatch, capsys
):
    from harness.sweep import job as jobs

    cfg = compose_config(["variant=cot", f"results_dir={tmp_path}"])

    def disk_full(*args: object) -> None:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:  # as run_job wraps a failed write
            raise OSError(f"could not write the results ({exc})") from None

    monkeypatch.setattr(jobs, "run_job", disk_full)
    with pytest.raises(OSError, match="could not write the results"):
        jobs.run_one(cfg, keep_going=True)
    assert capsys.readouterr().err == "" and not (tmp_path / "tiny").exists()


@pytest.mark.parametrize("key", ["force", "results_dir", "sweep"])
def test_unhashed_keys_exist_in_the_config(key):
    assert key in compose_config([])


def test_a_stored_run_is_reused_when_only_keys_that_change_no_measurement_moved(tmp_path):
    """A run stored when its config hash still covered the SLO keeps its results: the
    stored config is hashed as today, not the hash it was stored with."""
    cfg = compose_config(["slo.tpot_ms=30"])
    stored = results.resolved_config(cfg)
    key = {"config": results.config_hash(cfg), "vllm": "v"}
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    pq.write_table(pa.table({"problem_id": pa.array([], pa.string())}), job_dir / results.REQUESTS)
    then = json_digest({k: v for k, v in stored.items() if k not in ("force", "results_dir")})
    assert then != key["config"]  # what the run was stored with
    summary = {"complete": True, "num_requests": 0, "config": stored,
               "run_key": {**key, "config": then}}  # fmt: skip
    (job_dir / results.SUMMARY).write_text(json.dumps(summary))
    assert results.changed_parts(job_dir, key) == []
    assert results.changed_parts(job_dir, {**key, "vllm": "w"}) == ["vllm"]
    longer = compose_config(["max_tokens=7"])
    assert results.changed_parts(job_dir, {**key, "config": results.config_hash(longer)}) == [
        "config"
    ]
