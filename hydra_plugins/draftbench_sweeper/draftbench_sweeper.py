"""draftbench's Hydra sweeper: BasicSweeper's grid, filtered and ordered by ``harness.sweep.sweeper``.

Hydra only instantiates plugins that live in the ``hydra_plugins`` namespace package;
the planning logic is :func:`harness.sweep.sweeper.plan`. Selected by
``conf/hydra/sweeper/draftbench.yaml``. Every kept job is checked (models, tokenizers,
prompt lengths), done or not, before the first one starts (``harness.sweep.job.check_sweep``,
the job's own rule for done); bad input prints ``error: <message>`` and exits with status 2.
With ``plan=true`` the plan is printed (``harness.sweep.plan``) and no job runs. A sweep
that wrote runs ends with one line on where its time went (``harness.sweep.job.time_spent``).
When jobs failed (see ``failures.jsonl``) the sweep exits with 1.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.types import Override
from omegaconf import open_dict, read_write


class DraftbenchSweeper(BasicSweeper):
    """BasicSweeper whose job list comes from :func:`harness.sweep.sweeper.plan`."""

    def _compose(self, overrides: list[str]) -> Any:
        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with read_write(cfg), open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def split_arguments(  # type: ignore[override]
        self, overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        from harness import grid, results
        from harness.checks import exit_on_bad_input, exit_on_unwritable
        from harness.sweep.job import check_sweep
        from harness.sweep.sweeper import plan

        composed = [(job, self._compose(job)) for job in grid.expand(overrides)]
        configs = {tuple(o): c for o, c in composed}
        with exit_on_bad_input():
            planned = plan(composed)
            if planned.note():
                print(planned.note())
            if composed and composed[0][1].plan:
                from harness.sweep.plan import show

                show(planned, configs)
                return []
            for job in planned.jobs:  # one sweep per results directory at a time
                with exit_on_unwritable(results.sweep_dir(configs[tuple(job)])):
                    results.lock_sweep(results.sweep_dir(configs[tuple(job)]))
            done = check_sweep([configs[tuple(job)] for job in planned.jobs])
            if done:
                print(done)
        if not planned.jobs:
            return []
        return list(BasicSweeper.split_overrides_to_chunks(planned.jobs, max_batch_size))

    def sweep(self, arguments: list[str]) -> Any:
        import time
        from pathlib import Path

        from harness.checks import exit_on_unwritable
        from harness.sweep.job import FAILED, RAN, time_spent

        assert self.config is not None
        start = time.time()
        with exit_on_unwritable(Path(self.config.hydra.sweep.dir)):  # a full disk: one line
            returns = super().sweep(arguments)
        ran = [r.cfg for batch in returns for r in batch if r.return_value == RAN]
        spent = time_spent(ran, time.time() - start, since=start)
        if spent:
            print(spent)
        statuses = [r.return_value for batch in returns for r in batch]
        failed = statuses.count(FAILED)
        if failed:
            print(f"{failed} of {len(statuses)} jobs failed; see failures.jsonl", file=sys.stderr)
            sys.exit(1)
        return returns
