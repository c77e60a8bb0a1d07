"""On a real engine: grading stays off the generation loop, warm-up, provenance, repeats."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from harness import results
from harness.backends import engine as engines
from harness.backends.offline import Offline
from harness.config import compose_config
from harness.sweep import runner
from harness.sweep.job import repeat_configs, run_or_record_failure
from harness.sweep.runner import prepare, run, warm_up

pytestmark = pytest.mark.slow
SLOW_GRADE_S = 1.0
REQUEST_SUCCESS = "vllm:request_success"


@pytest.fixture(scope="module")
def overrides(tiny_pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("hot_path")
    target = shutil.copytree(tiny_pair[0], out / "target")  # this module changes its weights
    engines.clear()
    yield [
        f"models.targets.cot={target}",
        f"results_dir={out / 'results'}",
        "max_tokens=16",
        "calibrate=false",
        "pairing=sequential",
    ]
    engines.clear()


def _finished(llm) -> int:
    return sum(int(m.value) for m in llm.get_metrics() if m.name == REQUEST_SUCCESS)


def test_a_slow_grader_adds_nothing_to_latencies_or_wall_time(overrides, monkeypatch):
    job = prepare(compose_config([*overrides, "variant=cot", "limit=8", "concurrency=4"]))
    engine, _ = engines.get(job.spec)
    warm_up(job, Offline(engine.llm))
    fast, fast_wall, _ = run(job, Offline(engine.llm), progress=False)
    real_grade = runner.grade

    def slow_grade(*args, **kwargs):
        import time

        time.sleep(SLOW_GRADE_S)
        return real_grade(*args, **kwargs)

    monkeypatch.setattr(runner, "grade", slow_grade)
    slow, slow_wall, _ = run(job, Offline(engine.llm), progress=False)
    assert [r.output_hash for r in slow] == [r.output_hash for r in fast]
    # grading inside the step loop delayed the second wave by up to 3 x SLOW_GRADE_S
    for field in ("ttft_s", "e2e_s"):
        mean_fast = statistics.mean(getattr(r, field) for r in fast)
        mean_slow = statistics.mean(getattr(r, field) for r in slow)
        assert mean_slow < mean_fast + 0.4 * SLOW_GRADE_S, field
    assert slow_wall < fast_wall + 2 * SLOW_GRADE_S  # 8 gradings inside would add 8 s


def test_warm_up_sends_the_jobs_own_prompts_at_its_concurrency(overrides):
    cfg = compose_config([*overrides, "variant=cot", "limit=3", "concurrency=2", "warmup=2"])
    job = prepare(cfg)
    engine, _ = engines.get(job.spec)
    before = _finished(engine.llm)
    warm_up(job, Offline(engine.llm))
    assert _finished(engine.llm) - before == 2 * 2  # two rounds of min(2, 3) prompts
    job = prepare(compose_config([*overrides, "variant=cot", "limit=3", "warmup=0"]))
    before = _finished(engine.llm)
    warm_up(job, Offline(engine.llm))
    assert _finished(engine.llm) == before


def test_repeats_record_provenance_and_rerun_when_the_model_changes(overrides, capsys):
    cfg = compose_config([*overrides, "variant=cot", "limit=2", "repeats=2", "seed=5"])
    assert run_or_record_failure(cfg, progress=False) == "ran"
    dirs = [results.sweep_dir(c) / results.job_name(c) for c in repeat_configs(cfg)]
    assert dirs[1].name.endswith("-s6-t0-n2-r1")
    summaries = [json.loads((d / results.SUMMARY).read_text()) for d in dirs]
    assert [(s["seed"], s["repeat"]) for s in summaries] == [(5, 0), (6, 1)]
    first = summaries[0]
    assert set(first["versions"]) == {"python", "vllm", "torch", "transformers", "draftbench"}
    assert first["hardware"]["cpu"] and first["hardware"]["cpu_count"] >= 1
    assert "commit" in first["git"] and "dirty" in first["git"]
    assert (
        first["models"]["models.targets.cot"]["digest"]
        == first["run_key"]["model models.targets.cot"]
    )
    assert first["dataset_digest"] and first["command"]

    assert run_or_record_failure(cfg, progress=False) == "skipped"
    # a result that does not read back is not trusted: that repeat runs again, alone
    requests = dirs[0] / results.REQUESTS
    requests.write_bytes(requests.read_bytes()[:100])
    capsys.readouterr()
    assert run_or_record_failure(cfg, progress=False) == "ran"
    out = capsys.readouterr().out
    assert f"re-running {dirs[0].name}: its stored results are incomplete" in out
    assert f"skip {dirs[1].name}" in out
    assert results.read_summary(dirs[0]) is not None

    target = cfg.models.targets.cot
    weights = f"{target}/model.safetensors"
    with open(weights, "r+b") as f:  # other weights under the same name and size
        f.seek(-64, 2)
        f.write(bytes(64))
    engines.clear()  # the cached engine holds the old weights
    capsys.readouterr()
    assert run_or_record_failure(cfg, progress=False) == "ran"
    out = capsys.readouterr().out
    assert f"re-running {results.job_name(cfg)}: model models.targets.cot changed" in out
