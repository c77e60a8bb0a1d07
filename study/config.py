"""A study is a config: ``conf/study/<name>.yaml`` names its sweeps (grid, fixed
overrides, pairing, repeats), the steps around them (building the experiment's models,
calibration, pre-flight, draftbench beside its peers), how often the drift sentinel may
re-run a run, and its report's options. :func:`load` reads one and refuses unknown keys and bad values with one line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONF = Path(__file__).resolve().parent.parent / "conf" / "study"
PAIRINGS = ("interleaved", "sequential")
RERUN_FLAGGED = 2  # re-runs of a run the drift sentinel flags, by default


class StudyError(ValueError):
    """A bad study name, config or option; the message names it."""


@dataclass(frozen=True)
class Sweep:
    """One sweep of a study: ``python -m harness -m`` into ``<results_dir>/<name>/``."""

    name: str
    grid: dict[str, str] = field(default_factory=dict)  # key -> comma-separated values
    overrides: tuple[str, ...] = ()  # fixed key=value overrides
    pairing: str = "interleaved"
    repeats: int = 1

    def args(self, experiment: str, extra: list[str], results_dir: Path) -> list[str]:
        """The harness overrides of this sweep: the study's experiment, the grid (a key it
        names replaces the experiment's values; the others keep them), its overrides, then
        ``extra`` (the command line's), where it writes."""
        return [
            f"experiment={experiment}",
            *(f"{k}={v}" for k, v in self.grid.items()),
            *self.overrides,
            f"pairing={self.pairing}",
            f"repeats={self.repeats}",
            *extra,
            f"results_dir={results_dir}",
            f"sweep={self.name}",
        ]


@dataclass(frozen=True)
class Preflight:
    """A pre-flight step: ``python -m harness.measure.preflight <sweep>/<run> --draft <draft>``."""

    sweep: str
    run: str
    draft: str


@dataclass(frozen=True)
class Study:
    """A study's config (``conf/study/<name>.yaml``)."""

    name: str
    description: str
    experiment: str
    sweeps: tuple[Sweep, ...]
    # python -m train.build experiment=<experiment> <overrides> first, once per entry (cached)
    builds: tuple[tuple[str, ...], ...] = ((),)
    calibration: bool = True  # python -m harness.sweep.calibrate after each sweep
    preflight: tuple[Preflight, ...] = ()
    # python -m bench.peers <peers> --csv <results_dir>/peers.csv after the sweeps (None: not run)
    peers: tuple[str, ...] | None = None
    rerun_flagged: int = RERUN_FLAGGED
    bootstrap: int = 2000
    seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        """The config as plain data, for ``study.json``."""
        from dataclasses import asdict

        return asdict(self)


def known(conf_dir: Path = CONF) -> list[str]:
    """The names of the studies in ``conf_dir``."""
    return sorted(p.stem for p in Path(conf_dir).glob("*.yaml"))


def _values(value: Any) -> str:
    """A grid value: a list as Hydra's comma-separated sweep, a scalar as itself."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _keys(where: str, data: Any, allowed: set[str], required: set[str] = frozenset()) -> None:
    if not isinstance(data, dict):
        raise StudyError(f"{where}: must be a mapping, not {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise StudyError(f"{where}: unknown key {unknown[0]} (known: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(data))
    if missing:
        raise StudyError(f"{where}: missing {missing[0]}")


def load(name: str, conf_dir: Path = CONF) -> Study:
    """The study ``conf_dir/<name>.yaml``.

    Raises:
        StudyError: an unknown name (the known ones listed), an unknown or missing key, or
            a bad value.
    """
    path = Path(conf_dir) / f"{name}.yaml"
    if not path.is_file():
        raise StudyError(f"study {name!r}: no {path.name} (known: {', '.join(known(conf_dir))})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise StudyError(f"{path}: not YAML ({e})") from None
    _keys(path.name, data, set(Study.__dataclass_fields__) - {"name"}, {"experiment"})
    sweeps = []
    for i, raw in enumerate(data.get("sweeps") or []):
        where = f"{path.name}: sweeps[{i}]"
        _keys(where, raw, set(Sweep.__dataclass_fields__), {"name"})
        sweep = Sweep(
            name=str(raw["name"]),
            grid={str(k): _values(v) for k, v in (raw.get("grid") or {}).items()},
            overrides=tuple(map(str, raw.get("overrides") or ())),
            pairing=raw.get("pairing", "interleaved"),
            repeats=raw.get("repeats", 1),
        )
        if sweep.pairing not in PAIRINGS:
            raise StudyError(f"{where}: pairing={sweep.pairing} (one of {', '.join(PAIRINGS)})")
        if not isinstance(sweep.repeats, int) or sweep.repeats < 1:
            raise StudyError(f"{where}: repeats={sweep.repeats} (an integer >= 1)")
        if "/" in sweep.name or sweep.name.startswith("."):
            raise StudyError(f"{where}: name={sweep.name} (a folder name)")
        sweeps.append(sweep)
    peers = data.get("peers")
    if peers is not None and not isinstance(peers, list):
        raise StudyError(f"{path.name}: peers={peers} (a list of bench/peers.py options)")
    if not sweeps and peers is None:
        raise StudyError(f"{path.name}: sweeps: name at least one (or run peers)")
    if len({s.name for s in sweeps}) < len(sweeps):
        raise StudyError(f"{path.name}: sweeps: two share a name")
    steps = []
    for i, raw in enumerate(data.get("preflight") or []):
        _keys(f"{path.name}: preflight[{i}]", raw, set(Preflight.__dataclass_fields__),
              set(Preflight.__dataclass_fields__))  # fmt: skip
        steps.append(Preflight(str(raw["sweep"]), str(raw["run"]), str(raw["draft"])))
    study = Study(
        name=name,
        description=str(data.get("description", "")),
        experiment=str(data["experiment"]),
        sweeps=tuple(sweeps),
        builds=_builds(path.name, data.get("builds", [[]])),
        calibration=bool(data.get("calibration", True)),
        preflight=tuple(steps),
        peers=None if peers is None else tuple(map(str, peers)),
        rerun_flagged=data.get("rerun_flagged", RERUN_FLAGGED),
        bootstrap=data.get("bootstrap", 2000),
        seed=data.get("seed", 0),
        slo=dict(data.get("slo") or {}),
    )
    check_rerun_flagged(study.rerun_flagged, f"{path.name}: rerun_flagged")
    if not isinstance(study.bootstrap, int) or study.bootstrap < 10:
        raise StudyError(f"{path.name}: bootstrap={study.bootstrap} (at least 10 replicates)")
    return study


def check_sweeps(study: Study, extra: list[str], results_dir: Path) -> None:
    """Check every combination each sweep of ``study`` runs with the harness overrides
    ``extra`` as ``python -m harness -m`` checks them (keys, types, ranges, a grid with
    nothing to run), before any step: nothing built, nothing written.

    Raises:
        harness.errors.ConfigError: the first bad override or combination.
    """
    from harness import grid
    from harness.config import check_group_overrides, check_overrides, compose_config
    from harness.sweep.sweeper import plan

    for sweep in study.sweeps:
        args = sweep.args(study.experiment, extra, results_dir)
        check_group_overrides(args)
        check_overrides(args)
        jobs = grid.multirun(args)
        plan([(job, compose_config([o for o in job if not o.startswith("hydra")])) for job in jobs])


def check_peers(study: Study) -> None:
    """The study's ``peers`` options as ``bench/peers.py`` reads them, before any step.

    Raises:
        StudyError: an unknown option or a bad value, one line.
    """
    if study.peers is None:
        return
    import argparse

    from bench.peers import add_cli_args, check_args
    from harness.errors import ConfigError

    parser = argparse.ArgumentParser(prog="bench/peers.py", exit_on_error=False, add_help=False)
    add_cli_args(parser)
    where = f"{study.name}.yaml: peers"
    try:
        args, unknown = parser.parse_known_args(list(study.peers))
        if unknown:
            raise StudyError(f"{where}: unknown option {unknown[0]} (bench/peers.py --help)")
        check_args(args)
    except (argparse.ArgumentError, ConfigError) as e:
        raise StudyError(f"{where}: {e}") from None


def _builds(where: str, value: Any) -> tuple[tuple[str, ...], ...]:
    """``builds``: a list of override lists, each one ``python -m train.build`` step."""
    if not isinstance(value, list) or not all(isinstance(b, list) for b in value):
        raise StudyError(f"{where}: builds={value} (a list of override lists; [] for none)")
    return tuple(tuple(map(str, b)) for b in value)


def check_rerun_flagged(value: Any, where: str = "rerun_flagged") -> int:
    """``value`` as a count of re-runs (an integer >= 0).

    Raises:
        StudyError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StudyError(f"{where}={value}: an integer >= 0")
    return value


def check_only(study: Study, value: str) -> tuple[str, ...]:
    """``sweeps=A,B``: the names of sweeps of ``study`` to run.

    Raises:
        StudyError: empty, or a name the study does not have (its sweeps listed).
    """
    names = tuple(n for n in value.split(",") if n)
    known_sweeps = [s.name for s in study.sweeps]
    unknown = [n for n in names if n not in known_sweeps]
    if not names or unknown:
        raise StudyError(
            f"sweeps={value}: {'name a sweep' if not names else f'no sweep {unknown[0]}'} "
            f"(study {study.name} has: {', '.join(known_sweeps)})"
        )
    return names
