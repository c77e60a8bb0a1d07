"""Run benchmark jobs: one job = (variant, dataset, spec.k, concurrency, seed, temperature).

    python -m harness variant=cot_sd dataset=synth_easy spec.k=3 limit=20
    python -m harness -m                       # the experiment's grid (hydra.sweeper.params)
    python -m harness -m spec.k=1,3,5 dataset=gsm8k variant=cot_sd
    python -m harness ... force=true           # re-run jobs whose results exist
    python -m harness -m ... plan=true         # print engines, LLM arguments, jobs, memory

No ``engine=`` override and a visible CUDA GPU append ``engine=cuda``. Guide: docs/USAGE.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> str:
    """Run the composed job (Hydra calls this once per job of a multirun); returns its status."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness import results
    from harness.checks import exit_on_bad_input, exit_on_unwritable
    from harness.errors import BackendError
    from harness.sweep.job import run_or_record_failure

    hydra_cfg = HydraConfig.get()
    if cfg.plan and hydra_cfg.mode != RunMode.MULTIRUN:
        from harness.sweep.plan import show
        from harness.sweep.sweeper import plan

        job = list(hydra_cfg.overrides.task)
        with exit_on_bad_input():
            show(plan([(job, cfg)]), {tuple(job): cfg})
        return "planned"
    hydra_dir = Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir
    try:
        with exit_on_bad_input(), exit_on_unwritable(results.sweep_dir(cfg)):
            return run_or_record_failure(
                cfg, hydra_dir, keep_going=hydra_cfg.mode == RunMode.MULTIRUN
            )
    except BackendError as exc:  # recorded in failures.jsonl; its cause is in the message
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except SystemExit:  # bad input, or a results folder that takes no more writes
        from harness.backends import live

        live.clear()  # the engines earlier jobs left running
        raise
    except KeyboardInterrupt:
        from harness.backends import live

        print(
            f"interrupted: job {results.job_name(cfg)} stopped; finished jobs are kept in "
            f"{results.sweep_dir(cfg)}",
            file=sys.stderr,
        )
        live.clear()  # engines' and servers' processes never saw the SIGINT (harness.backends.reaper)
        raise SystemExit(130) from None


if __name__ == "__main__":
    from harness import console, results
    from harness.checks import exit_on_bad_input, exit_on_unwritable
    from harness.config import (
        check_group_overrides,
        check_overrides,
        compose_config,
        cuda_visible,
        validate,
        with_engine_override,
    )

    console.quiet_libraries()
    with exit_on_bad_input():
        check_group_overrides(sys.argv[1:])
        check_overrides(sys.argv[1:])
        if not {"-m", "--multirun"} & set(sys.argv):  # a multirun's sweeper takes the lock
            single = compose_config([a for a in sys.argv[1:] if not a.startswith(("-", "hydra"))])
            validate(single)  # before anything is written (the lock, Hydra's .hydra/)
            if not single.plan:
                with exit_on_unwritable(results.sweep_dir(single)):
                    results.lock_sweep(results.sweep_dir(single))
    sys.argv = with_engine_override(sys.argv, cuda_visible())
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted before the first job started; nothing was written", file=sys.stderr)
        raise SystemExit(130) from None
