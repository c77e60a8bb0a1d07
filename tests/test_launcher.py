"""Scale-out: the submitit launchers group jobs by engine spec and match the basic launcher.

The SLURM code path runs here through ``hydra/launcher=submitit_local`` (same launcher
class hierarchy, local processes instead of sbatch); SLURM and CUDA configs are only
composed and validated, as there is no cluster or GPU.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from harness import results
from harness.config import ConfigError, check_parallelism, compose_config, validate

GRID = ["variant=cot,cot_sd", "spec.k=0,1", "dataset=synth_easy,synth_medium"]
COMPARED = ["problem_id", "output_hash", "correct", "output_tokens", "num_accepted_tokens"]


def _sweep(overrides: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "-m", *GRID, *overrides],
        capture_output=True,
        text=True,
        timeout=900,
    )


def _table(sweep_dir) -> pd.DataFrame:
    frames = [
        pd.read_parquet(job / results.REQUESTS).assign(job=job.name)
        for job in sorted(sweep_dir.iterdir())
        if results.read_summary(job) is not None
    ]
    return pd.concat(frames).sort_values(["job", "problem_id"])[["job", *COMPARED]]


@pytest.mark.slow
def test_submitit_local_matches_basic_launcher_and_resumes(tiny_overrides, tmp_path):
    local = [o for o in tiny_overrides if not o.startswith("results_dir=")]
    basic_dir, grouped_dir = tmp_path / "basic", tmp_path / "grouped"

    basic = _sweep([*local, f"results_dir={basic_dir}"])
    assert basic.returncode == 0, basic.stderr[-3000:]
    grouped_args = [*local, f"results_dir={grouped_dir}", "hydra/launcher=submitit_local"]
    grouped = _sweep(grouped_args)
    assert grouped.returncode == 0, grouped.stderr[-3000:]

    # 4 jobs over 2 engine specs (target alone, target + draft at K=1): 2 tasks
    assert "launcher: 4 jobs in 2 tasks (one per engine spec)" in grouped.stdout
    launches = {
        job.name: results.read_summary(job)["engine_launches"]
        for job in (grouped_dir / "tiny").iterdir()
        if results.read_summary(job) is not None
    }
    assert sorted(launches.values()) == [1, 1, 1, 1]  # each task started one engine

    # greedy decoding: the same tables whichever launcher ran the jobs
    pd.testing.assert_frame_equal(
        _table(basic_dir / "tiny").reset_index(drop=True),
        _table(grouped_dir / "tiny").reset_index(drop=True),
    )

    # a worker killed mid-job leaves no complete summary: resubmission re-runs only it
    jobs = grouped_dir / "tiny"
    lost = jobs / "cot_sd-synth_medium-k1-c1-s0-t0-n3"
    (lost / results.SUMMARY).unlink()
    kept = {p: p.stat().st_mtime_ns for p in jobs.glob(f"*/{results.SUMMARY}")}
    again = _sweep(grouped_args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert results.read_summary(lost) is not None
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # finished jobs were skipped


def test_slurm_launcher_and_cuda_engines_compose_and_validate():
    for engine, gpus in (("cuda", 1), ("cuda_tp2", 2)):
        cfg = compose_config(
            ["experiment=qwen2.5", f"engine={engine}", "variant=cot_sd", "spec.k=3"],
        )
        validate(cfg)
        check_parallelism(cfg.engine, gpus)
        assert cfg.engine.device == "cuda"
        assert cfg.models.targets.cot and cfg.models.drafts.cot
    launcher = compose_config(["hydra/launcher=submitit_slurm"], return_hydra_config=True)
    assert launcher.hydra.launcher._target_.endswith("GroupedSlurmLauncher")


def test_tensor_parallel_beyond_the_node_is_refused_before_submission():
    cfg = compose_config(["experiment=qwen2.5", "engine=cuda_tp2"])
    with pytest.raises(ConfigError, match="needs 2 GPUs but a node offers 1"):
        check_parallelism(cfg.engine, 1)
    bad = compose_config(
        ["experiment=qwen2.5", "engine=cuda_tp2", "engine.draft_tensor_parallel_size=3"]
    )
    with pytest.raises(ConfigError, match="must be 1 or the target's tensor_parallel_size"):
        validate(bad)
    with pytest.raises(ConfigError, match="tensor parallelism needs engine=cuda"):
        validate(compose_config(["engine.tensor_parallel_size=2"]))
