"""Calibration arithmetic on request timestamps and step counts; the cache key."""

from __future__ import annotations

import pytest

from harness import calibrate
from harness.calibrate import decode_timing, per_unit_s, token_units


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


def test_cache_key_changes_with_the_engine_and_the_model(tmp_path, monkeypatch):
    from harness.engine import EngineSpec

    model = tmp_path / "m"
    model.mkdir()
    (model / "manifest.json").write_text('{"steps": 1}')
    settings = {"dtype": "float32", "max_model_len": 256, "gpu_memory_utilization": 0.3,
                "tensor_parallel_size": 1, "enforce_eager": True, "max_num_seqs": 4,
                "enable_prefix_caching": False}  # fmt: skip
    entry = calibrate.Entry("m", None, 0, EngineSpec.plain(str(model), settings))
    key = calibrate.cache_key(entry)
    assert calibrate.cache_key(entry) == key
    other = EngineSpec.plain(str(model), {**settings, "max_num_seqs": 8})
    assert calibrate.cache_key(calibrate.Entry("m", None, 0, other)) != key
    (model / "manifest.json").write_text('{"steps": 2}')  # retrained
    assert calibrate.cache_key(entry) != key
