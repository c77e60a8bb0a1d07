"""Calibration arithmetic on request timestamps and step counts; the cache key."""

from __future__ import annotations

import dataclasses

import pytest

from harness import provenance
from harness.backends.engine import EngineSpec
from harness.calibration import record, timing
from harness.calibration.timing import decode_timing, per_unit_s, token_units
from harness.config import compose_config
from harness.errors import ConfigError
from harness.manifest import Manifest, write_manifest
from harness.sweep import calibrate

SETTINGS = {"device": "cpu", "dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.3,
            "tensor_parallel_size": 1, "enforce_eager": True, "max_num_seqs": 4,
            "enable_prefix_caching": False}  # fmt: skip


def test_step_time_is_decode_time_over_verify_steps_pooled_over_requests():
    # request 1: first token at 10.0 s, last at 10.5 s, 50 verify steps (10 ms a step);
    # request 2: 0.3 s over 20 steps (15 ms): pooled 0.8 s / 70 steps
    timings = [decode_timing(10.0, 10.5, 50), decode_timing(3.0, 3.3, 20)]
    assert timings[0].decode_s == pytest.approx(0.5)
    assert per_unit_s(timings) == pytest.approx(0.8 / 70)


def test_token_time_counts_every_token_after_the_first():
    # 96 tokens whose first came at 1.0 s and last at 1.95 s: 95 decode intervals of 10 ms
    timing = decode_timing(1.0, 1.95, token_units(96))
    assert per_unit_s([timing]) == pytest.approx(0.01)
    assert token_units(1) == 0


def test_no_units_have_no_time():
    assert per_unit_s([decode_timing(1.0, 1.0, 0)]) is None


def _stream(steps: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(timestamp, tokens so far) after the first token at 0 s and each (seconds, emitted)."""
    stream = [(0.0, 1)]
    for seconds, emitted in steps:
        stream.append((stream[-1][0] + seconds, stream[-1][1] + emitted))
    return stream


def test_prompt_lookup_steps_without_drafts_are_priced_apart_from_verify_steps():
    # verify steps take 9 ms whatever they accept (3, 1 and 2 tokens), steps without a
    # match 4 ms; vLLM reports only the 3 verify steps
    verify, plain = 0.009, 0.004
    steps = [(verify, 3), (plain, 1), (verify, 1), (plain, 1), (verify, 2)]
    t = timing.step_timing(_stream(steps), drafted=3)
    assert (t.units, t.undrafted, t.multi) == (3, 2, 2)
    assert t.decode_s == pytest.approx(3 * verify + 2 * plain)
    assert timing.step_costs([t]) == pytest.approx((verify, plain))
    # the old pooled figure, decode time / verify steps, charges the plain steps to them
    assert per_unit_s([t]) == pytest.approx(verify + 2 * plain / 3)


def _timing(verify: list[float], undrafted: list[float], units: int) -> timing.Timing:
    """``units`` verify steps whose drafted ones took ``verify``, and steps without drafts."""
    mean = sum(verify) / len(verify)
    return timing.Timing(
        decode_s=mean * units + sum(undrafted), units=units, undrafted=len(undrafted),
        multi_s=sum(verify), multi=len(verify), multi_sq=sum(v * v for v in verify),
    )  # fmt: skip


def test_a_rest_within_the_verify_steps_noise_leaves_steps_without_drafts_unpriced():
    steady = [0.009] * 20  # verify steps of 9 ms with no spread: any rest is a step's time
    assert timing.step_costs([_timing(steady, [0.004] * 2, 20)]) == pytest.approx((0.009, 0.004))
    # 9 ms +- 1 ms over 20 verify steps: the rest's standard error per step without drafts
    # is about 1 ms / sqrt(19) x 20 / 2 = 2.3 ms, and 4 ms is within two of them
    noisy = [0.008, 0.010] * 10
    assert timing.step_costs([_timing(noisy, [0.004] * 2, 20)]) == (pytest.approx(0.009), None)
    assert timing.step_costs([_timing(noisy, [0.004] * 40, 20)]) == pytest.approx(
        (0.009, 0.004)
    )  # many steps without drafts: the rest is well measured
    # a rest below 0, or above a verify step by more than the noise, is not a step's time
    assert timing.step_costs([_timing(steady, [-0.001] * 2, 20)])[1] is None
    assert timing.step_costs([_timing(steady, [0.030] * 2, 20)])[1] is None


def test_a_draft_model_drafts_every_step_so_all_steps_price_a_verify_step():
    t = timing.step_timing(_stream([(0.010, 1), (0.012, 4), (0.011, 2)]), drafted=3)
    assert t.undrafted == 0
    assert timing.step_costs([t]) == (pytest.approx(0.011), None)


def test_steps_without_drafts_and_nothing_accepted_leave_the_verify_step_unknown():
    t = timing.step_timing(_stream([(0.009, 1), (0.004, 1)]), drafted=1)
    assert timing.step_costs([t]) == (None, None)


def test_identity_names_models_inside_the_checkout_relative_to_it(tmp_path, monkeypatch):
    inside = str(provenance.CHECKOUT / "models" / "tiny" / "target_cot")
    outside = str(tmp_path / "draft")
    plain = EngineSpec.plain(inside, SETTINGS)
    spec = dataclasses.replace(plain, k=3, draft=outside, method="draft_model")
    ident = record.identity(record.Entry("t", outside, 3, spec))
    assert ident["llm_kwargs"]["model"] == "models/tiny/target_cot"
    assert ident["llm_kwargs"]["speculative_config"]["model"] == outside
    assert list(ident["models"]) == ["models/tiny/target_cot", outside]
    assert spec.llm_kwargs()["model"] == inside  # what vLLM loads is unchanged
    monkeypatch.chdir(provenance.CHECKOUT / "docs")  # a hub id is no path, wherever we are
    hub = record.identity(record.Entry("h", None, 0, EngineSpec.plain("org/model", SETTINGS)))
    assert hub["llm_kwargs"]["model"] == "org/model" and list(hub["models"]) == ["org/model"]


def test_cache_key_changes_with_the_engine_and_the_model(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)  # a test worker sets it

    model = tmp_path / "m"
    model.mkdir()
    built = Manifest("target_cot", "full", "", "k1", "d", {}, 1, None, None, 1.0, 1)
    write_manifest(model, built)
    entry = record.Entry("m", None, 0, EngineSpec.plain(str(model), SETTINGS))
    key = record.cache_key(entry)
    assert record.cache_key(entry) == key
    other = EngineSpec.plain(str(model), {**SETTINGS, "max_num_seqs": 8})
    assert record.cache_key(record.Entry("m", None, 0, other)) != key
    write_manifest(model, dataclasses.replace(built, key="k2", steps=2))  # retrained
    assert record.cache_key(entry) != key
    key = record.cache_key(entry)
    (model / "model.safetensors").write_bytes(b"weights")  # changed in place, same manifest
    assert record.cache_key(entry) != key
    key = record.cache_key(entry)
    versions = provenance.versions()
    monkeypatch.setattr(provenance, "versions", lambda: {**versions, "vllm": "0.0.1"})
    assert record.cache_key(entry) != key  # another vLLM
    monkeypatch.setattr(provenance, "versions", lambda: versions)
    assert record.cache_key(entry) == key
    real = provenance.hardware
    machine = real("cpu")
    monkeypatch.setattr(provenance, "hardware", lambda device: {**machine, "cpu": "another"})
    assert record.cache_key(entry) != key  # another node of a mixed cluster
    monkeypatch.setattr(provenance, "hardware", real)
    bound = EngineSpec.plain(str(model), {**SETTINGS, "cpu_threads_bind": "1"})
    assert bound.env()["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert record.cache_key(record.Entry("m", None, 0, bound)) != key  # another placement
    here = EngineSpec.plain(str(model), {**SETTINGS, "multiprocessing": False})
    assert record.cache_key(record.Entry("m", None, 0, here)) != key  # in the harness's process
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # set in the shell: recorded, keyed
    assert provenance.hardware("cpu")["cpu_threads_bind"] == "0"
    assert record.cache_key(entry) != key


def test_a_new_measurement_replaces_the_stale_files_of_its_engine(tmp_path):
    def written(target, draft, k, seconds):
        m = {"concurrency": 1, "requests": 3, "decode_s": 1.0, "units": 1, "per_unit_s": seconds}
        return {"target": target, "draft": draft, "k": k, "identity": {},
                "measurements": {"1": m}}  # fmt: skip

    out = tmp_path / record.CALIBRATION
    record.save(out / "old.json", written("t", "ngram", 3, 0.5))  # before a rebuild
    scheduled = {**written("t", "ngram", 3, 0.4), "k_schedule": "1-2k3_3-32k0"}
    record.save(out / "scheduled.json", scheduled)  # another engine: kept

    def with_schedule(rec, ranges, **identity):  # written before records named it
        schedule = {"num_speculative_tokens_per_batch_size": ranges}
        return {**rec, "identity": {"llm_kwargs": {"speculative_config": schedule}, **identity}}

    record.save(
        out / "older_scheduled.json",
        with_schedule(written("t", "ngram", 3, 0.6), [[1, 4, 3], [5, 32, 1]]),
    )
    # a schedule with a K = 0 level, written before such levels were timed per token: unread
    record.save(
        out / "stale.json", with_schedule(written("t", "ngram", 2, 0.7), [[1, 4, 2], [5, 32, 0]])
    )
    record.save(
        out / "timed.json",
        with_schedule(
            written("t", "ngram", 2, 0.8), [[1, 8, 2], [9, 32, 0]], k0_levels=record.K0_LEVELS
        ),
    )
    record.save(out / "plain.json", written("t", None, 0, 0.1))
    record.save(out / "other_k.json", written("t", "ngram", 1, 0.2))
    new = written("t", "ngram", 3, 0.3)
    record.replace_stale(record.save(out / "new.json", new), new)
    assert sorted(p.name for p in out.iterdir()) == [
        "new.json", "older_scheduled.json", "other_k.json", "plain.json", "scheduled.json",
        "stale.json", "timed.json",
    ]  # fmt: skip
    assert {(r["k"], r["k_schedule"], r["per_unit_s"]) for r in record.table(tmp_path)} == {
        (3, None, 0.3),
        (3, "1-2k3_3-32k0", 0.4),
        (3, "1-4k3_5-32k1", 0.6),
        (2, "1-8k2_9-32k0", 0.8),
        (0, None, 0.1),
        (1, None, 0.2),
    }


def test_the_reader_skips_a_stale_schedules_file_and_an_unreadable_one(tmp_path):
    def written(ranges, **identity):
        schedule = {"num_speculative_tokens_per_batch_size": ranges}
        return {"target": "t", "draft": "ngram", "k": 2, "measurements": {},
                "identity": {"llm_kwargs": {"speculative_config": schedule}, **identity}}  # fmt: skip

    stale = record.save(tmp_path / "stale.json", written([[1, 4, 2], [5, 32, 0]]))
    timed = written([[1, 4, 2], [5, 32, 0]], k0_levels=record.K0_LEVELS)
    one_k = written([[1, 4, 2], [5, 32, 1]])  # no K = 0 level: never stale
    assert record.load(stale) is None
    assert record.load(record.save(tmp_path / "timed.json", timed)) == timed
    assert record.load(record.save(tmp_path / "one_k.json", one_k)) == one_k
    (tmp_path / "torn.json").write_text('{"target": ')
    assert record.load(tmp_path / "torn.json") is None
    assert record.load(tmp_path / "missing.json") is None


def test_a_speculator_run_at_several_concurrencies_is_also_calibrated_with_speculation_off():
    def cfg(variant, *overrides):
        return compose_config([f"variant={variant}", *overrides])

    cfgs = [cfg("cot_sd", f"spec.k={k}", f"concurrency={c}") for k in (1, 3) for c in (1, 4)]
    cfgs += [cfg("cot_sd", "spec.k=3", "spec.k_schedule=[[1,2,3],[3,32,0]]", "concurrency=16"),
             cfg("cod_sd", "spec.k=1"), cfg("cot", "concurrency=8")]  # fmt: skip
    # suffix decoding drafts only at its own K (vLLM's proposer): no schedule, no K = 0 level
    cfgs += [cfg("cot_suffix", "spec.k=3", f"concurrency={c}") for c in (1, 4)]
    off = {e: c for e, c in calibrate.entries(cfgs).items() if e.k == 0 and e.k_schedule}
    ((entry, levels),) = off.items()  # one per speculator at one K, whatever its Ks
    batch = cfgs[0].engine.max_num_seqs
    assert levels == {1, 4} and entry.draft == cfgs[0].models.drafts.cot
    assert entry.k_schedule == f"1-{batch}k0"
    speculative = entry.spec.llm_kwargs()["speculative_config"]
    assert speculative["num_speculative_tokens_per_batch_size"] == [[1, batch, 0]]
    assert speculative["model"] == entry.spec.draft
    # an open-loop job's batch size follows the load: no level to time speculation off at
    served = [cfg("cot_sd", "spec.k=1", "backend=server", *load)
              for load in (["request_rate=2", "concurrency=32"], ["concurrency=1"], ["concurrency=4"])]  # fmt: skip
    (levels,) = [c for e, c in calibrate.entries(served).items() if e.k == 0 and e.k_schedule]
    assert levels == {1, 4}


def test_an_open_loop_jobs_engines_are_calibrated_at_the_batch_sizes_load_produces():
    served = compose_config(["variant=cot_sd", "spec.k=1", "backend=server", "request_rate=2",
                             "concurrency=12"])  # fmt: skip
    closed = compose_config(["variant=cot_sd", "spec.k=1", "backend=server", "concurrency=12"])
    assert calibrate.levels(served) == {1, 2, 4, 8, 12} and calibrate.levels(closed) == {12}
    found = calibrate.entries([served])
    job, target = calibrate.job_entry(served), EngineSpec.baseline(served).laid_out(True)
    assert found[job] == {1, 2, 4, 8, 12}
    assert [c for e, c in found.items() if e.spec == target] == [{1, 2, 4, 8, 12}]
    drafts = [c for e, c in found.items() if e.k == 0 and e.draft is None and e.spec != target]
    assert drafts == [{12}]  # the draft as a target prices c, at the cap


def test_a_server_jobs_engines_are_timed_as_its_servers_run_them():
    """A server's engine core runs in processes of its own, so its calibration's engines do
    too; an offline job's are timed as they run (``engine=cpu``: in the harness's process)."""
    served = compose_config(["variant=cot_sd", "spec.k=3", "backend=server", "concurrency=4"])
    offline = compose_config(["variant=cot_sd", "spec.k=3", "concurrency=4"])
    found, alone = calibrate.entries([served]), calibrate.entries([offline])
    assert len(found) == len(alone) == 3  # the job's engine, its plain target, its draft alone
    assert all(e.spec.multiprocessing() for e in found)
    assert not any(e.spec.multiprocessing() for e in alone)
    # the same engines otherwise; the layout is in the calibration file's key
    assert {e.spec.laid_out(True) for e in alone} == {e.spec for e in found}
    assert {record.cache_key(e) for e in found}.isdisjoint(record.cache_key(e) for e in alone)


def test_a_sweep_running_one_engine_in_two_layouts_is_refused_before_any_timing():
    served = compose_config(["variant=cot_sd", "spec.k=3", "backend=server", "concurrency=4"])
    offline = compose_config(["variant=cot_sd", "spec.k=3", "concurrency=4"])
    with pytest.raises(ConfigError, match=r"engine\.multiprocessing=.*separate sweeps"):
        calibrate.entries([offline, served])  # one file per engine: each would delete the other


def test_a_speculative_job_without_a_k0_job_still_calibrates_its_plain_target():
    cfg = compose_config(["variant=cot_sd", "spec.k=3", "spec.synthetic_acceptance_length=2"])
    target = EngineSpec.baseline(cfg)
    assert "speculative_config" not in target.llm_kwargs()
    plain = [e.spec for e in calibrate.entries([cfg]) if e.k == 0 and e.draft is None]
    assert plain.count(target) == 1  # beside the draft model timed as a target
    k0 = compose_config(["variant=cot", "spec.k=0"])  # the same plain engine: one entry
    both = [e.spec for e in calibrate.entries([cfg, k0]) if e.k == 0 and e.draft is None]
    assert both.count(target) == 1 and len(both) == len(plain)


def test_a_slow_spell_on_one_side_of_one_round_does_not_move_the_windows_plain_cost(
    monkeypatch,
):
    # three rounds: the plain engine at 4 ms a token and the speculative one at 10 ms a
    # verify step, except the second round's plain side, caught in a slow spell (8 ms)
    plain_s = iter([0.004, 0.008, 0.004])

    def timed(llm, batch, k, concurrency):
        if llm == "plain":
            return [decode_timing(0.0, 95 * next(plain_s), token_units(96))]
        return [decode_timing(0.0, 30 * 0.010, 30)]

    monkeypatch.setattr(timing, "prompts", lambda tokenizer, n: [[1]] * n)
    monkeypatch.setattr(timing, "_time", timed)
    m = timing.measure("spec", None, 3, 1, requests=3, baseline="plain")
    assert m.per_unit_s == pytest.approx(0.010)
    assert m.baseline_per_unit_s == pytest.approx(0.004)  # pooled, the three read 5.33 ms
    assert timing.measure("spec", None, 3, 1).baseline_per_unit_s is None  # no baseline
