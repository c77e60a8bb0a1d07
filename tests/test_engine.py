"""The engine cache, the runner and interleaved pairing on real vLLM engines (CPU, tiny
random models).

One module-scoped sequence keeps it to three engine launches: plain decoding, draft-model
speculation with K = 1 beside the plain engine (interleaved), then a second plain
instance beside the first (the A/A check).
"""

from __future__ import annotations

import psutil
import pyarrow.parquet as pq
import pytest

from harness import metrics, provenance, results
from harness.backends import engine as engines
from harness.backends import live
from harness.backends.engine import EngineSpec
from harness.backends.offline import Offline, generate
from harness.calibration import record, timing
from harness.checks import load_tokenizer
from harness.config import compose_config
from harness.sweep import calibrate
from harness.sweep.job import run_job
from harness.sweep.runner import engine_specs, prepare

pytestmark = pytest.mark.slow


def _live_tree() -> tuple[float, set[int]]:
    """RSS (MiB) of this process and its live children, and the children's pids."""
    me = psutil.Process()
    kids = [k for k in me.children(recursive=True) if k.status() != psutil.STATUS_ZOMBIE]
    rss = me.memory_info().rss + sum(k.memory_info().rss for k in kids)
    return rss / 2**20, {k.pid for k in kids}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def overrides(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    out = tmp_path_factory.mktemp("engine_results")
    engines.clear()
    yield [
        f"models.targets.cot={target}",
        f"models.drafts.cot={draft}",
        f"results_dir={out}",
        "limit=3",
        "max_tokens=24",
        "calibrate=false",  # test_calibration_sees_every_engine_step_of_a_request measures
    ]
    engines.clear()


def _rows(cfg) -> list[dict]:
    """The request rows of a finished job."""
    path = results.sweep_dir(cfg) / results.job_name(cfg) / results.REQUESTS
    return pq.read_table(path).to_pylist()


def _hashes(cfg) -> dict[str, str]:
    """Output hash by problem id of a finished job."""
    return {r["problem_id"]: r["output_hash"] for r in _rows(cfg)}


def test_one_launch_per_spec_greedy_speculation_equals_plain_decoding_within_each_pair(
    overrides,
):
    plain_cfg = compose_config([*overrides, "variant=cot", "pairing=sequential"])
    spec_cfg = compose_config([*overrides, "variant=cot_sd", "spec.k=1"])
    plain, spec = EngineSpec.from_config(plain_cfg), EngineSpec.from_config(spec_cfg)
    rss_before, _ = _live_tree()
    launches = live.launches(engines.OFFLINE)

    first, reused = engines.get(plain)
    assert not reused and first.start_s > 0
    assert engines.get(plain) == (first, True)
    rss_plain, plain_pids = _live_tree()
    assert plain_pids and rss_plain - rss_before > 200  # the engine runs in child processes
    baseline = run_job(plain_cfg, progress=False)
    assert baseline.spec is None and baseline.engine_reused
    assert baseline.job.pairing == "sequential" and baseline.reference["engine"] == "job"

    summary = run_job(spec_cfg, progress=False)  # the plain engine stays: the job's baseline
    rss_spec, spec_pids = _live_tree()
    assert not summary.engine_reused and engines.get_all((spec, plain))[0][0].spec == spec
    assert plain_pids < spec_pids  # both engines live
    assert rss_spec > rss_plain + 0.5 * (rss_plain - rss_before)  # two engines, not one
    assert live.launches(engines.OFFLINE) == launches + 2

    assert _hashes(spec_cfg) == _hashes(plain_cfg)  # greedy speculation == plain decoding
    assert summary.counter_mismatch is None
    assert summary.spec.num_steps > 0 and summary.spec.num_draft_tokens == summary.spec.num_steps
    assert summary.job.pairing == "interleaved"
    rows = _rows(spec_cfg)
    assert [r["pair_output_hash"] for r in rows] == [r["output_hash"] for r in rows]
    assert all(r["pair_tpot_s"] > 0 and r["pair_e2e_s"] > r["pair_ttft_s"] > 0 for r in rows)
    assert summary.reference["engine"] == "baseline" and summary.reference["k"] == 0
    assert summary.reference["start_s"] > 0 and summary.reference["end_s"] > 0


def test_sampled_speculation_records_the_corrections_at_rejections(overrides):
    # vLLM's seeded sampling with a draft does not repeat across processes: one seed's
    # acceptance on these random models reads anywhere from 0 to 1, so four seeds are drawn
    rejections = 0
    for seed in range(3, 7):
        cfg = compose_config(
            [*overrides, "variant=cot_sd", "spec.k=1", "temperature=0.3", f"seed={seed}"]
        )
        summary = run_job(cfg, progress=False)
        assert summary.engine_reused and summary.engine_start_s == 0.0
        assert summary.counter_mismatch is None
        for row in _rows(cfg):
            assert 0 <= row["num_accepted_tokens"] <= row["num_draft_tokens"]
            assert 0.0 <= row["acceptance_rate"] <= 1.0
            assert row["output_tokens"] == len(row["output_token_ids"])
            assert row["output_hash"] == metrics.output_hash(row["output_token_ids"])
            rejected_steps = row["acceptance_histogram"][0]  # K = 1: a rejection accepts nothing
            assert rejected_steps - 1 <= len(row["rejection_tokens"]) <= rejected_steps
            rejections += len(row["rejection_tokens"])
    assert rejections > 0


@pytest.mark.parametrize("concurrency", [1, 3])
def test_generate_keeps_the_requested_number_of_requests_in_flight(overrides, concurrency):
    job = prepare(compose_config([*overrides, "variant=cot_sd", "spec.k=1"]))
    engine, _ = engines.get_all(job.specs)[0]
    spans: dict[int, tuple[float, float]] = {}  # wall-clock (arrival, finish) per request

    def on_output(index, output):
        m = output.metrics
        spans[index] = (
            m.arrival_time,
            m.arrival_time + m.first_token_latency + m.last_token_ts - m.first_token_ts,
        )

    prompts = [r.prompt_token_ids for r in job.requests]
    generate(engine.llm, prompts, job.sampling_params(), concurrency, on_output)
    assert sorted(spans) == [0, 1, 2]
    last_arrival = max(start for start, _ in spans.values())
    first_finish = min(end for _, end in spans.values())
    all_overlap = last_arrival < first_finish
    assert all_overlap == (concurrency == 3)


def test_calibration_sees_every_engine_step_of_a_request(overrides):
    job = prepare(compose_config([*overrides, "variant=cot_sd", "spec.k=1"]))
    engine, _ = engines.get_all(job.specs)[0]
    steps: dict[str, int] = {}
    drafted: dict[str, int] = {}

    def on_step(output):
        steps[output.request_id] = steps.get(output.request_id, 0) + 1

    def on_output(_, output):
        spec = output.outputs[0].spec_decode_metrics
        drafted[output.request_id] = sum(spec.histogram)

    prompts = [r.prompt_token_ids for r in job.requests]
    generate(engine.llm, prompts, timing.sampling_params(), 1, on_output, on_step)
    # one output for the first token, then one per verify step: a draft model drafts at
    # every step, so vLLM's verify steps are all the others
    assert len(steps) == 3 and {r: n - 1 for r, n in steps.items()} == drafted
    tokenizer = load_tokenizer(job.spec.target)
    measured = timing.measure(engine.llm, tokenizer, 1, 1)
    assert measured.undrafted == 0 and measured.units > 0 and measured.per_unit_s > 0
    assert measured.baseline_per_unit_s is None
    plain, _ = engines.get_all(job.specs)[1]  # the interleaved job's plain target
    paired = timing.measure(engine.llm, tokenizer, 1, 2, requests=2, baseline=plain.llm)
    assert paired.requests == 4 and paired.units > 0 and paired.baseline_per_unit_s > 0


def test_a_plain_job_interleaved_pairs_two_instances_of_its_engine(overrides):
    """The A/A check: K = 0 interleaved runs beside a second instance of the same engine;
    the speculative engine shuts down, the plain one is kept. Runs while the first test's
    pair is still live (the tests below start engines of other specs)."""
    cfg = compose_config([*overrides, "variant=cot", "max_tokens=16"])
    before = engines.get_all(
        prepare(compose_config([*overrides, "variant=cot_sd", "spec.k=1"])).specs
    )
    spec_pids = {p.pid for p in psutil.Process().children(recursive=True)}
    launches = live.launches(engines.OFFLINE)
    summary = run_job(cfg, progress=False)
    assert summary.job.pairing == "interleaved" and summary.engine_reused
    assert live.launches(engines.OFFLINE) == launches + 1
    pair = engines.get_all(prepare(cfg).specs)
    assert [reused for _, reused in pair] == [True, True]
    assert pair[0][0] is before[1][0] and pair[1][0] is not before[1][0]  # the kept plain engine
    now = {p.pid for p in psutil.Process().children(recursive=True)}
    started = now - spec_pids  # the second instance's processes (and its watchdog)
    assert started and any(not _alive(pid) for pid in spec_pids - now)
    rows = _rows(cfg)
    assert [r["pair_output_hash"] for r in rows] == [r["output_hash"] for r in rows]
    engines.clear()
    assert not any(_alive(pid) for pid in started)


def test_prompt_lookups_plain_side_is_laid_out_like_its_engine(overrides):
    """Prompt lookup's engine always runs in processes of its own; its plain side runs there
    too, so both sides hand each step off alike, and a run or calibration made beside a
    plain side in this process is not taken for one."""
    ngram = compose_config([*overrides, "variant=cot_ngram", "spec.k=3", "pairing=interleaved",
                            "engine.multiprocessing=false"])  # fmt: skip
    own, plain = engine_specs(ngram)
    assert own.apart_by_family() and plain is not None and plain.multiprocessing()
    assert plain == EngineSpec.baseline(ngram).laid_out(True).sharing(2)
    drafted = compose_config([*overrides, "variant=cot_sd", "spec.k=3", "pairing=interleaved",
                              "engine.multiprocessing=false"])  # fmt: skip
    own, plain = engine_specs(drafted)
    assert not own.apart_by_family() and plain == EngineSpec.baseline(drafted).sharing(2)
    assert plain is not None and not plain.multiprocessing()  # both in this process
    served = compose_config([*overrides, "variant=cot_ngram", "spec.k=3", "backend=server"])
    _, plain = engine_specs(served)  # a server's engine core runs apart whatever the spec says
    assert plain == EngineSpec.baseline(served).sharing(2)
    entry = calibrate.job_entry(ngram)
    stored = record.identity(entry)
    assert stored["beside"] == "a plain engine in processes of its own"
    assert "beside" not in record.identity(calibrate.job_entry(drafted))


def test_an_engine_kept_beside_one_that_stops_still_answers(overrides):
    """Engines in this process share vLLM's distributed state: the plain engine kept while
    its pair's in-process engine gives way to one in processes of its own (as prompt lookup's
    does) still answers."""
    plain = EngineSpec.baseline(compose_config([*overrides, "variant=cot_sd", "spec.k=1"]))
    pair = [EngineSpec.from_config(compose_config([*overrides, "variant=cot_sd", "spec.k=1",
                                                   f"engine.multiprocessing={own}"]))
            for own in ("false", "true")]  # fmt: skip
    assert not plain.multiprocessing() and not pair[0].multiprocessing()
    engines.clear()
    engines.get_all((pair[0], plain))
    (_, _), (kept, reused) = engines.get_all((pair[1], plain))
    assert reused
    done = []
    generate(kept.llm, [[1, 2, 3]], timing.sampling_params(), 1, lambda _, o: done.append(o))
    assert len(done[0].outputs[0].token_ids) == timing.OUTPUT_TOKENS
    engines.clear()


def test_the_calibration_cli_times_an_interleaved_jobs_engine_beside_its_plain_one(overrides):
    measured: dict[int, list[dict]] = {}
    job = [*overrides, "variant=cot_sd", "spec.k=1", "sweep=window"]
    for path in calibrate.run(job):
        written = record.load(path)
        measured.setdefault(written["k"], []).append(written["measurements"]["1"])
    (spec,) = measured[1]
    assert spec["per_unit_s"] > 0 and spec["baseline_per_unit_s"] > 0  # one window
    assert [m["baseline_per_unit_s"] for m in measured[0]] == [None, None]  # target, draft


def test_speculation_off_is_the_speculator_engine_without_a_single_draft(overrides, tmp_path):
    cfgs = [compose_config([*overrides, "variant=cot_sd", "spec.k=1", f"concurrency={c}"])
            for c in (1, 2)]  # fmt: skip
    (off,) = [e for e in calibrate.entries(cfgs) if e.k == 0 and e.draft]
    written = record.load(calibrate.calibrate(off, [1], tmp_path, force=False))
    assert written["k_schedule"] == off.k_schedule and written["draft"] == off.spec.draft
    assert written["measurements"]["1"]["per_unit_s"] > 0  # timed per token
    assert written["measurements"]["1"]["git"] == provenance.git_state()  # made at this commit
    engine, reused = engines.get(off.spec)
    prompts = [r.prompt_token_ids for r in prepare(cfgs[0]).requests]
    done = []
    generate(engine.llm, prompts, timing.sampling_params(), 1, lambda _, o: done.append(o))
    assert reused and len(done) == len(prompts)
    for output in done:  # every step ran at K = 0: nothing proposed, nothing accepted
        spec = output.outputs[0].spec_decode_metrics
        assert spec is None or (spec.num_draft_tokens == 0 and not any(spec.histogram))
        assert len(output.outputs[0].token_ids) == timing.OUTPUT_TOKENS


def test_a_schedules_k0_level_is_timed_per_token_not_as_a_verify_step(overrides, tmp_path):
    cfg = compose_config([*overrides, "variant=cot_sd", "spec.k=1",
                          "spec.k_schedule=[[1,1,1],[2,32,0]]"])  # fmt: skip
    entry = calibrate.job_entry(cfg)
    llm = engines.get(entry.spec)[0].llm
    calibrate.calibrate(entry, [1], tmp_path, force=False, llm=llm)
    drafts = Offline(llm).spec_counts().num_steps
    written = record.load(calibrate.calibrate(entry, [2], tmp_path, force=False, llm=llm))
    # at batch 2 it drafts only where a request runs alone (its wave's last step), where
    # K = 1 drafting throughout would verify about every other token
    alone = Offline(llm).spec_counts().num_steps - drafts
    assert drafts > 0 and alone <= 2 * timing.REQUESTS_PER_SLOT
    drafting, off = written["measurements"]["1"], written["measurements"]["2"]
    assert drafting["units"] > 0 and drafting["per_unit_s"] > 0  # K = 1 at batch 1
    assert off["units"] == 0 and off["per_unit_s"] is None  # K = 0 at batch 2
    assert off["undrafted"] == 2 * timing.REQUESTS_PER_SLOT * (timing.OUTPUT_TOKENS - 1)
    assert off["undrafted_step_s"] > 0


def test_a_k_schedule_drafts_only_at_the_batch_sizes_it_names(overrides):
    schedule = [*overrides, "variant=cot_sd", "spec.k=2", "spec.k_schedule=[[1,2,2],[3,32,0]]",
                "pairing=sequential"]  # fmt: skip
    batched = compose_config([*schedule, "concurrency=3"])  # three in flight: K = 0
    alone = compose_config([*schedule, "concurrency=1"])  # one at a time: K = 2
    first, second = run_job(batched, progress=False), run_job(alone, progress=False)
    assert second.engine_reused  # one engine spec: the schedule, not the load, defines it
    assert first.job.k_schedule == "1-2k2_3-32k0" and first.counter_mismatch is None
    rows = _rows(alone)
    assert all(r["num_draft_tokens"] == 2 * r["num_spec_steps"] > 0 for r in rows)
    # drafts only while fewer than three run (before all three are scheduled, or after one
    # finished): a small share of the steps one request at a time drafts at
    drafted = sum(r["num_draft_tokens"] for r in _rows(batched))
    assert drafted <= sum(r["num_draft_tokens"] for r in rows) / 3
    assert _hashes(batched) == _hashes(alone)  # greedy either way: the same tokens
