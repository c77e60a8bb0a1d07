"""Scale-out configs: SLURM and CUDA (tensor parallel) engines compose and validate.

There is no cluster or GPU here: these are only composed and validated. The grouped
launcher itself runs through ``hydra/launcher=submitit_local`` in tests/test_sweep_cli.py.
"""

from __future__ import annotations

import pytest

from harness.config import ConfigError, check_parallelism, compose_config, validate


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
