"""Submitit launchers (SLURM, local) that keep engine reuse when a sweep scales out.

Hydra's submitit launcher makes one task per job; these subclasses group a multirun's jobs
by engine spec (target, draft, K, engine settings), one task per group running its jobs
one after another in one process, so each engine starts once, as in a local sweep.
Selected by ``conf/hydra/launcher/submitit_{slurm,local}.yaml``; every job's parallelism
is checked against the GPUs a task asks for before anything is submitted.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher


class _EngineGroups:
    """Mixin: one submitit task per engine spec instead of one per job."""

    _groups: dict[int, list[tuple[int, list[str]]]]

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from harness.backends.engine import EngineSpec
        from harness.checks import exit_on_bad_input
        from harness.config import check_parallelism

        groups: dict[EngineSpec, list[tuple[int, list[str]]]] = {}
        devices = set()
        with exit_on_bad_input():
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                cfg = self.hydra_context.config_loader.load_sweep_config(
                    self.config, list(overrides)
                )
                devices.add(cfg.engine.device)
                check_parallelism(cfg.engine, self.params.get("gpus_per_node"))
                groups.setdefault(EngineSpec.from_config(cfg), []).append((idx, list(overrides)))
        if devices == {"cpu"}:  # a CPU node has no GPUs to ask for (SLURM refuses the request)
            self.params["gpus_per_node"] = 0
        heads = [members[0][1] for members in groups.values()]
        self._groups = {initial_job_idx + i: members for i, members in enumerate(groups.values())}
        print(f"launcher: {len(job_overrides)} jobs in {len(heads)} tasks (one per engine spec)")
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            per_task = super().launch(heads, initial_job_idx)
        except (FailedJobError, UncompletedJobError) as exc:
            print(f"error: launcher: {_unfinished(exc)}; the jobs that finished are kept, and "
                  "the same command runs the rest (other tasks go on)", file=sys.stderr)  # fmt: skip
            sys.exit(1)
        return [ret for rets in per_task for ret in rets]

    def __call__(
        self,
        sweep_overrides: list[str],
        job_dir_key: str,
        job_num: int,
        job_id: str,
        singleton_state: dict[Any, Any],
    ) -> list[JobReturn]:
        """Run every job of the task's engine group in this process, in order."""
        run_one = super().__call__
        return [
            run_one(overrides, job_dir_key, idx, f"job_id_for_{idx}", singleton_state)
            for idx, overrides in self._groups[job_num]
        ]


def _unfinished(exc: Exception) -> str:
    """One line on a task that did not finish, from submitit's error: its id and state, or
    the last line of its traceback."""
    text = str(exc)
    if found := re.search(r"Job (\S+) \(task: \d+\).*?state: ([^)]*)\)", text, re.S):
        return f"task {found[1]} did not finish ({found[2]})"
    trace = [line for line in text.splitlines() if line.strip() and not line.startswith("---")]
    return f"a task did not finish ({trace[-1] if trace else type(exc).__name__})"


class GroupedSlurmLauncher(_EngineGroups, SlurmLauncher):
    """SLURM: one array task per engine spec."""


class GroupedLocalLauncher(_EngineGroups, LocalLauncher):
    """Local processes (tests, a single multi-GPU box): one process per engine spec."""
