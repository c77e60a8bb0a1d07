"""The sweep grid: the jobs a multirun's overrides expand to (each job's override list).

One expansion, Hydra's basic sweeper's (a list of values is one axis; a later override of a
key replaces an earlier one), for the sweeper, the calibration and the sweep directories a
multirun writes (:func:`harness.results.written_sweeps`).
"""

from __future__ import annotations

from typing import Any


def expand(overrides: list[Any]) -> list[list[str]]:
    """Each job's overrides of parsed ``overrides`` (Hydra ``Override`` objects)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    (jobs,) = BasicSweeper.split_arguments(overrides, None)
    return jobs


def multirun(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides of ``python -m harness -m <overrides>``: the experiment's grid
    (``hydra.sweeper.params``) under ``overrides``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness.config import compose_config

    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
    grid = compose_config(fixed, return_hydra_config=True).hydra.sweeper.params or {}
    return expand(parser.parse_overrides([f"{k}={v}" for k, v in grid.items()] + overrides))
