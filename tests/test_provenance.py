"""Run keys, model identity, provenance, repeats and the draft sample method (no engine)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import provenance, results
from harness.backends.engine import EngineSpec
from harness.checks import resolve_model
from harness.config import ConfigError, compose_config, validate
from harness.manifest import Manifest, write_manifest
from harness.sweep.job import models_used, repeat_configs, run_key
from harness.sweep.runner import job_info, prepare


@pytest.fixture
def own_pair(tiny_pair, tmp_path):
    """A copy of the tiny pair this test may change."""
    target, draft = tiny_pair
    return shutil.copytree(target, tmp_path / "target"), shutil.copytree(draft, tmp_path / "draft")


def _overrides(pair, tmp_path, *extra: str) -> list[str]:
    target, draft = pair
    return [
        f"models.targets.cot={target}",
        f"models.drafts.cot={draft}",
        f"results_dir={tmp_path / 'results'}",
        "limit=3",
        "variant=cot_sd",
        "spec.k=2",
        *extra,
    ]


def _key(cfg) -> dict[str, str]:
    job = prepare(cfg)
    return run_key(cfg, job, models_used(cfg, job))


def test_swapped_weights_change_the_identity_even_under_the_same_manifest(own_pair):
    target, draft = own_pair
    manifest = Manifest("target_cot", "full", "", "key1", "d", {}, 1, None, None, 1.0, 1)
    write_manifest(target, manifest)
    before = provenance.model_identity(str(target))
    assert before["manifest_key"] == "key1"
    weights = target / "model.safetensors"
    shutil.copy(draft / "model.safetensors", weights)  # another model's weights, same name
    after = provenance.model_identity(str(target))
    assert after["manifest_key"] == "key1" and after["digest"] != before["digest"]
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # nothing changes: same id
    assert provenance.model_identity(str(target)) == after


def test_the_identity_carries_the_manifests_training_outside_its_digest(own_pair):
    target, _ = own_pair
    write_manifest(
        target, Manifest("eagle3_cot", "eagle3", "", "k", "d", {}, 150, None, None, 60.0, 200)
    )
    before = provenance.model_identity(str(target))
    more = Manifest(
        "eagle3_cot", "eagle3", "", "k", "d", {}, 150, None, None, 90.0, 3000, "", [0.6]
    )
    write_manifest(target, more)  # same key: the key, not these counts, decides a re-run
    after = provenance.model_identity(str(target))
    assert before["training"]["examples"] == 200 and before["training"]["train_seconds"] == 60.0
    assert after["training"] == {"examples": 3000, "steps": 150, "train_seconds": 90.0,
                                 "eval_accuracy": [0.6]}  # fmt: skip
    assert after["digest"] == before["digest"]


def test_a_hub_id_without_a_cached_copy_is_its_name():
    identity = provenance.model_identity("no-such-org/no-such-model")
    assert identity["model"] == "no-such-org/no-such-model" and identity["revision"] is None


def test_the_run_key_names_what_changed(own_pair, tmp_path):
    cfg = compose_config(_overrides(own_pair, tmp_path))
    key = _key(cfg)
    assert set(key) == {
        "config", "model models.targets.cot", "model models.drafts.cot", "problems",
        "system prompt", "draftbench", "vllm",
    }  # fmt: skip
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    pq.write_table(pa.table({"problem_id": pa.array([], pa.string())}), job_dir / results.REQUESTS)
    complete = {"complete": True, "num_requests": 0, "run_key": key}
    (job_dir / results.SUMMARY).write_text(json.dumps(complete))
    assert results.changed_parts(job_dir, key) == []
    shutil.copy(own_pair[1] / "model.safetensors", own_pair[0] / "model.safetensors")
    assert results.changed_parts(job_dir, _key(cfg)) == ["model models.targets.cot"]
    # the same config hash, other problems: the synthetic generator's seed
    other = compose_config(_overrides(own_pair, tmp_path, "dataset.seed=5"))
    changed = results.changed_parts(job_dir, _key(other))
    assert "problems" in changed and "model models.drafts.cot" not in changed
    assert results.changed_parts(tmp_path / "missing", key) is None


def test_provenance_names_versions_hardware_and_the_checkout():
    assert set(provenance.versions()) == {"python", "vllm", "torch", "transformers", "draftbench"}
    assert provenance.versions()["vllm"]
    machine = provenance.hardware("cpu")
    assert machine["cpu"] and machine["cpu_count"] >= 1
    assert {"gpu", "gpu_count", "gpu_memory_gib", "gpu_driver"} <= set(machine)
    git = provenance.git_state()
    assert git["commit"] is None or (len(git["commit"]) == 40 and isinstance(git["dirty"], bool))


def test_repeats_run_new_seeds_under_their_own_names():
    configs = repeat_configs(compose_config(["repeats=3", "seed=4", "limit=2"]))
    assert [(c.seed, c.repeat) for c in configs] == [(4, 0), (5, 1), (6, 2)]
    names = [results.job_name(c) for c in configs]
    assert names[0].endswith("-s4-t0-n2") and names[2].endswith("-s6-t0-n2-r2")
    assert [job_info(c).repeat for c in configs] == [0, 1, 2]
    with pytest.raises(ConfigError, match="repeats=0"):
        validate(compose_config(["repeats=0"]))


def test_the_draft_sample_method_reaches_vllm_and_the_job_columns():
    cfg = compose_config(["variant=cot_sd", "spec.k=2", "spec.draft_sample_method=probabilistic"])
    spec_config = EngineSpec.from_config(cfg).llm_kwargs()["speculative_config"]
    assert spec_config["draft_sample_method"] == "probabilistic"
    assert job_info(cfg).draft_sample_method == "probabilistic"
    assert job_info(compose_config(["variant=cot_sd", "spec.k=2"])).draft_sample_method == "greedy"
    assert job_info(compose_config(["variant=cot"])).draft_sample_method is None
    with pytest.raises(ConfigError, match=r"spec\.draft_sample_method=sampled"):
        validate(compose_config(["variant=cot_sd", "spec.k=2", "spec.draft_sample_method=sampled"]))


def test_the_recorded_command_names_its_program_relative_to_the_checkout(monkeypatch):
    inside = str(provenance.CHECKOUT / "harness" / "__main__.py")
    monkeypatch.setattr(sys, "argv", [inside, "variant=cot", "limit=3"])
    assert provenance.command() == ["harness/__main__.py", "variant=cot", "limit=3"]
    monkeypatch.setattr(sys, "argv", ["/usr/bin/elsewhere", "x=1"])
    assert provenance.command() == ["/usr/bin/elsewhere", "x=1"]


def test_a_model_inside_the_checkout_is_recorded_relative_to_it(own_pair, monkeypatch):
    target, _ = own_pair
    outside = provenance.model_identity(str(target))
    assert outside["model"] == str(target.resolve())
    monkeypatch.setattr(provenance, "CHECKOUT", target.parent)  # as if it were cloned there
    inside = provenance.model_identity(str(target))
    assert inside["model"] == target.name and inside["files"] == outside["files"]
    assert inside["digest"] != outside["digest"]


def test_a_model_under_a_linked_models_dir_is_recorded_inside_the_checkout(
    tiny_pair, tmp_path, monkeypatch
):
    target, _ = tiny_pair
    checkout = tmp_path / "clone"
    checkout.mkdir()
    (checkout / "models").symlink_to(target.parent)  # models/ linked from elsewhere
    monkeypatch.setattr(provenance, "CHECKOUT", checkout)
    name = resolve_model(str(checkout / "models" / target.name))
    assert provenance.model_identity(name)["model"] == f"models/{target.name}"


def test_the_hardware_record_names_the_vector_isa_torch_dispatches_to_and_the_memory():
    import torch

    machine = provenance.hardware("cpu")
    assert machine["cpu_isa"] == torch.backends.cpu.get_cpu_capability() != ""
    assert machine["memory_gib"] > 0
    assert provenance.cpu_label() == f"{machine['cpu']} ({machine['cpu_isa']})"


def _hardware_runs(tmp_path, recorded: dict) -> None:
    """Two runs of one sweep, the cot_sd one's hardware record extended by ``recorded``."""
    from tests import run_fixtures

    v = {x.name: x for x in run_fixtures.SEED_STUDY}
    run_fixtures.write_job(tmp_path, run_fixtures.Job("s", v["cot"], "synth_easy", "easy", 0))
    job = run_fixtures.Job("s", v["cot_sd"], "synth_easy", "easy", 2)
    path = run_fixtures.write_job(tmp_path, job) / results.SUMMARY
    summary = json.loads(path.read_text())
    summary["hardware"] |= recorded
    path.write_text(json.dumps(summary))


def test_a_run_recorded_before_the_isa_reads_it_as_unknown_beside_one_that_has_it(tmp_path):
    from reports import load

    _hardware_runs(tmp_path, {"cpu_isa": "AVX2", "memory_gib": 7.5})
    runs = load.load(tmp_path).runs.set_index("variant")
    assert runs.loc["cot_sd", "hardware_cpu_isa"] == "AVX2"
    assert runs.loc["cot", "hardware_cpu_isa"] == provenance.UNKNOWN
    assert runs.loc["cot", "hardware_memory_gib"] == provenance.UNKNOWN
    assert runs.loc["cot", "hardware_gpu"] is None  # a field every record has stays as it is


def test_runs_that_all_predate_the_isa_read_it_as_unknown_rather_than_drop_the_column(tmp_path):
    from reports import load

    _hardware_runs(tmp_path, {})
    runs = load.load(tmp_path).runs
    assert set(runs["hardware_cpu_isa"]) == set(runs["hardware_memory_gib"]) == {provenance.UNKNOWN}


def test_a_study_names_its_vector_isa_and_memory_where_recorded():
    from reports.study import made

    def machine_line(hardware: dict) -> str:
        study = {
            "name": "s", "git": {"commit": "0" * 40, "dirty": False}, "versions": {},
            "hardware": {"cpu": "Some CPU", "cpu_count": 2, "gpu": None, **hardware},
            "command": "python -m study s", "started": "today", "steps": [],
            "raw": {"runs": 0, "bytes": 0, "largest_bytes": 0, "compaction": "none"},
            "sentinel": {"reruns": [], "rerun_flagged": 0},
        }  # fmt: skip
        return next(line for line in made(study) if line.startswith("Made by"))

    assert "on Some CPU (AVX512, 2 cores, 15.5 GiB memory, no GPU)" in machine_line(
        {"cpu_isa": "AVX512", "memory_gib": 15.5}
    )
    # a study made before them
    assert "on Some CPU (vector ISA not recorded, 2 cores, no GPU)" in machine_line({})
