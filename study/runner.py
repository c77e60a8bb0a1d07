"""Running a study: its steps in order, each a command of its own (the models, each sweep,
the drift sentinel's re-runs, calibration, pre-flight, draftbench beside its peers), then
its folder ``<docs_dir>/<name>/``: the raw runs (``study.raw``), ``study.json`` (what made them) and
the report generated from both (``reports.study.write``).

A study refuses a dirty tree unless allowed (the report then says so at its top). The
harness resumes what exists, so running a study again runs only what is missing (the
peers step, which keeps nothing to resume, runs whole unless ``sweeps=`` names sweeps); the
step table keeps an earlier make's steps at each commit that made a run or a calibration
still in the study (each step records its commit: :func:`earlier_steps`). After a
sweep, a run whose sentinel moved more than its pairing's ``reports.sentinel.threshold`` is
moved aside to ``<sweep>/.flagged/<job>.<n>`` and run again, at most ``rerun_flagged``
times per run (counted by those copies, across invocations); one still flagged is kept.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import provenance, results
from reports import peers, sentinel
from reports import study as folder
from study import raw
from study.config import Study, StudyError

FLAGGED = ".flagged"  # <sweep>/.flagged/<job>.<n>: a run the sentinel flagged, moved aside
# after Ctrl-C, how long a step's command may take to stop on its own (the terminal sent it
# the SIGINT too), then after a SIGTERM, before it is killed
STOP_WAIT_S = (60.0, 10.0)


class StepFailed(RuntimeError):
    """A step's command exited with an error; the message names the step and its status."""


@dataclass(frozen=True)
class Step:
    """One step as run: its name, its command, its wall time."""

    step: str
    command: str
    wall_s: float


def check_clean(git: dict[str, Any], allow_dirty: bool) -> None:
    """Refuse to start from a dirty tree, or one not under git, unless ``allow_dirty``
    (``harness.provenance.git_state``'s answer).

    Raises:
        StudyError: the tree is dirty or unknown and not allowed.
    """
    if allow_dirty:
        return
    if git.get("commit") is None:
        raise StudyError(
            "not a git checkout: a study records its commit (allow_dirty=true runs it anyway)"
        )
    if git.get("dirty"):
        raise StudyError(
            "the tree has uncommitted changes to tracked files: commit them first, or "
            "allow_dirty=true (the report then says so at its top)"
        )


def flagged_runs(sweep_dir: Path) -> dict[str, float]:
    """Job name -> drift of each complete run of ``sweep_dir`` the sentinel flags."""
    found = {}
    for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        summary = results.read_summary(job)
        drift = sentinel.drift(summary.get("reference")) if summary else None
        if sentinel.is_flagged(drift, (summary or {}).get("pairing")):
            found[job.name] = drift
    return found


def attempts(sweep_dir: Path, job: str) -> list[Path]:
    """The flagged copies of ``job`` moved aside so far, oldest first."""
    copies = [p for p in (sweep_dir / FLAGGED).glob(f"{job}.*") if p.name[len(job) + 1 :].isdigit()]
    return sorted(copies, key=lambda p: int(p.name[len(job) + 1 :]))


def rerun_flagged(sweep_dir: Path, limit: int, rerun: Callable[[], None]) -> list[dict[str, Any]]:
    """Move each flagged run of ``sweep_dir`` aside and ``rerun`` the sweep (which runs
    what is missing), until no run is flagged or each flagged one has been moved aside
    ``limit`` times; return, per run flagged at any point, the drift of each attempt (the
    kept run's last) and whether the kept run is still flagged."""
    while True:
        due = [job for job in flagged_runs(sweep_dir) if len(attempts(sweep_dir, job)) < limit]
        if not due:
            break
        for job in due:
            aside = sweep_dir / FLAGGED / f"{job}.{len(attempts(sweep_dir, job)) + 1}"
            aside.parent.mkdir(exist_ok=True)
            (sweep_dir / job).rename(aside)
        rerun()
    kept = flagged_runs(sweep_dir)
    out = []
    for job in sorted(
        p.name for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        copies = attempts(sweep_dir, job)
        if not copies and job not in kept:
            continue
        summaries = [results.read_summary(p) or {} for p in [*copies, sweep_dir / job]]
        drifts = [sentinel.drift(s.get("reference")) for s in summaries]
        out.append({"sweep": sweep_dir.name, "job": job, "drifts": drifts, "flagged": job in kept})
    return out


class Runner:
    """Runs a study's steps as child processes of this interpreter, timing each."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def execute(self, argv: list[str]) -> int:
        """Run one command; its exit status. On Ctrl-C the command, which got the SIGINT
        too, is given time to stop (and say so) before the interrupt goes on."""
        child = subprocess.Popen(argv)
        try:
            return child.wait()
        except KeyboardInterrupt:
            for wait_s, stop in zip(STOP_WAIT_S, (child.terminate, child.kill), strict=True):
                try:
                    child.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    stop()
            child.wait()
            raise

    def __call__(self, name: str, module: str, *args: str) -> None:
        """Run ``python -m module args`` as the step ``name``.

        Raises:
            StepFailed: it exited with an error.
        """
        command = f"python -m {module} {shlex.join(args)}"
        print(f"study: {name}: {command}", flush=True)
        start = time.perf_counter()
        status = self.execute([sys.executable, "-m", module, *args])
        if status:
            raise StepFailed(f"step '{name}' exited with status {status}: {command}")
        self.steps.append(Step(name, command, round(time.perf_counter() - start, 1)))


def run(
    study: Study,
    extra: list[str],
    results_dir: Path,
    docs_dir: Path,
    allow_dirty: bool = False,
    rerun_limit: int | None = None,
    command: str = "",
    step: Runner | None = None,
    only: tuple[str, ...] | None = None,
) -> Path:
    """Run ``study`` (``extra``: harness overrides added to every sweep; runs under
    ``results_dir``; each step through ``step``, default a :class:`Runner`), then write
    ``docs_dir/<name>/``; return its REPORT.md. With ``only`` (sweep names), the other
    sweeps are not run: their committed runs, calibration and sentinel record are kept.

    Raises:
        StudyError: a dirty tree not allowed, or a sweep to keep with no committed runs.
        StepFailed: a step failed (what finished is kept; running again resumes).
    """
    git = provenance.git_state()
    check_clean(git, allow_dirty)
    out = docs_dir / study.name
    kept = tuple(s.name for s in study.sweeps if only is not None and s.name not in only)
    files = () if study.peers is None else (peers.ROUNDS,)
    if only is not None and (out / folder.RAW / peers.ROUNDS).is_file():
        kept += files  # sweeps=A,B: the committed rounds stay (none yet: the step runs)
    earlier = folder.read_study(out) if (out / folder.STUDY_JSON).is_file() else None
    for name in kept:
        if earlier is None or not (out / folder.RAW / name).exists():
            raise StudyError(
                f"sweeps={','.join(only or ())}: sweep {name} has no committed runs in "
                f"{out / folder.RAW} to keep (name it too)"
            )
    limit = study.rerun_flagged if rerun_limit is None else rerun_limit
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    step = step or Runner()
    datasets = [  # the build's data too, however the command line set it (++datasets_dir=)
        a.lstrip("+") for a in extra if a.lstrip("+").startswith("datasets_dir=")
    ]
    for i, overrides in enumerate(study.builds):
        name = "models" if len(study.builds) == 1 else f"models {i + 1}"
        step(name, "train.build", f"experiment={study.experiment}", *overrides, *datasets)
    reruns = [
        r for r in (earlier or {}).get("sentinel", {}).get("reruns", []) if r["sweep"] in kept
    ]
    for sweep in (s for s in study.sweeps if s.name not in kept):
        args = sweep.args(study.experiment, extra, results_dir)
        step(f"sweep {sweep.name}", "harness", "-m", *args)
        reruns += rerun_flagged(
            results_dir / sweep.name, limit,
            lambda args=args, name=sweep.name: step(f"re-run flagged {name}", "harness", "-m", *args),
        )  # fmt: skip
        if study.calibration:
            step(f"calibrate {sweep.name}", "harness.sweep.calibrate", *args)
    for p in study.preflight:
        run_dir = str(results_dir / p.sweep / p.run)
        step(
            f"pre-flight {p.sweep}/{p.run}",
            "harness.measure.preflight",
            run_dir,
            "--draft",
            p.draft,
        )
    if files and peers.ROUNDS not in kept:
        step("peers", "bench.peers", *study.peers, "--csv", str(results_dir / peers.ROUNDS))
    names = [s.name for s in study.sweeps]
    copied = raw.copy_runs(results_dir, names, out / folder.RAW, kept, files)
    steps = [{**asdict(s), "commit": git["commit"]} for s in step.steps]
    record = {
        "name": study.name,
        "description": study.description,
        "command": command or f"python -m study {study.name}",
        "config": study.to_row(),
        "overrides": extra,
        "git": {**git, "allow_dirty": allow_dirty},
        "versions": provenance.versions(),
        "hardware": provenance.hardware("cuda" if _has_gpu() else "cpu"),
        "started": started,
        "steps": [*earlier_steps(earlier, raw.commits(out / folder.RAW), kept), *steps],
        "sentinel": {"rerun_flagged": limit, "reruns": reruns},
        "raw": copied.to_row(),
        "report": {
            "sweeps": [s.name for s in study.sweeps],
            "bootstrap": study.bootstrap,
            "seed": study.seed,
            "slo": study.slo,
        },
    }
    (out / folder.STUDY_JSON).write_text(json.dumps(record, indent=2) + "\n")
    return folder.write(out)


def earlier_steps(
    earlier: dict[str, Any] | None, commits: set[str], kept: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The steps of an earlier make (its ``study.json``, or None) made at one of ``commits``
    (those of the runs and calibrations kept), and its peers step when its rounds are
    ``kept``, each with its commit (a record from before steps had one: the make's)."""
    if earlier is None:
        return []
    made_at = earlier["git"].get("commit")
    steps = [{**s, "commit": s.get("commit", made_at)} for s in earlier["steps"]]
    peers_kept = peers.ROUNDS in kept
    return [s for s in steps if s["commit"] in commits or (peers_kept and s["step"] == "peers")]


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()
