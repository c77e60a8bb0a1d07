"""Where a job's results live and how they are written and found.

``<results_dir>/<sweep>/<job>/`` holds ``requests.parquet``, ``summary.json`` (marked
complete, with the sha256 of ``requests.parquet``) and ``.hydra/``, written in a hidden
temp directory and renamed into place, so a killed job leaves nothing behind.
:func:`complete_summary` is the one reader of "is this run complete" (the report, and
:func:`changed_parts`, what the job and the sweeper ask through
``harness.sweep.job.check``); failed jobs are appended to ``<sweep>/failures.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import backends, schedule
from harness.files import atomic_dir, file_digest, json_digest
from harness.records import RequestRecord, RunSummary, request_columns

SUMMARY = "summary.json"
REQUESTS = "requests.parquet"
REQUESTS_SHA256 = "requests_sha256"  # the summary key of the sha256 of REQUESTS
FAILURES = "failures.jsonl"
SERVER_LOGS = ".servers"  # the logs of the servers a sweep started (hidden: not a job)
# Keys that do not change what a job computes: left out of the config hash.
# ``repeats``/``repeat`` only label runs: each repeat's seed is in its config; the report
# applies ``slo`` to the stored per-request times; ``sentinel_requests`` times only the drift
# sentinel, not the job's requests.
UNHASHED_KEYS = ("force", "calibrate", "plan", "results_dir", "sweep", "repeats", "repeat", "slo",
                 "tracking", "sentinel_requests")  # fmt: skip
# keys (dotted paths) added after runs were stored: hashed only when set away from this
# default, so a stored run (which lacks the key) keeps its hash
LATER_KEYS = {"pair_window": None, "engine.multiprocessing": True}


def arrow_type(hint: Any) -> Any:
    """The Arrow type of a record field's type: ``T | None`` as T, ``tuple[T, ...]`` as a
    list of T."""
    import pyarrow as pa

    scalars = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = args
        return arrow_type(inner)
    if origin is tuple:
        return pa.list_(arrow_type(args[0]))
    return scalars[hint]


def request_schema() -> Any:
    """The Arrow schema of ``requests.parquet`` (the tidy request table), from the records."""
    import pyarrow as pa

    return pa.schema([(name, arrow_type(t)) for name, t in request_columns().items()])


def job_name(cfg: Any) -> str:
    """Readable, unique-per-sweep name: ``<variant>-<dataset>-k<K>-c<conc>-s<seed>-t<temp>-n<limit>``,
    plus the backend's part (``-server`` on a server), ``-rps<rate>`` for open-loop arrivals,
    ``-ks<schedule>`` for a K schedule, ``-a<length>`` for a synthetic acceptance length,
    ``-i<N>`` for N engine instances, ``-w<N>`` for a pair window and ``-r<repeat>`` for
    repeats after the first."""
    limit = "all" if cfg.limit is None else cfg.limit
    ranges = cfg.spec.k_schedule if cfg.spec.k > 0 else None
    load = backends.of(cfg).run_name
    load += "" if cfg.request_rate is None else f"-rps{cfg.request_rate:g}"
    load += "" if ranges is None else f"-ks{schedule.label(ranges)}"
    synthetic = cfg.spec.synthetic_acceptance_length if cfg.spec.k > 0 else None
    load += "" if synthetic is None else f"-a{synthetic:g}"
    load += f"-i{cfg.instances}" if cfg.instances > 1 else ""
    load += "" if cfg.pair_window is None else f"-w{cfg.pair_window}"
    repeat = f"-r{cfg.repeat}" if cfg.repeat else ""
    return (
        f"{cfg.variant.name}-{cfg.dataset.name}-k{cfg.spec.k}-c{cfg.concurrency}{load}"
        f"-s{cfg.seed}-t{cfg.temperature:g}-n{limit}{repeat}"
    )


def sweep_dir(cfg: Any) -> Path:
    """``<results_dir>/<sweep>``."""
    return Path(cfg.results_dir) / cfg.sweep


# The overrides that decide where a sweep writes (``sweep`` defaults to the experiment's name).
LOCATION_KEYS = ("results_dir", "sweep", "experiment")


def written_sweeps(overrides: Sequence[str]) -> list[Path]:
    """``<results_dir>/<sweep>`` of each sweep ``python -m harness -m <overrides>`` writes.

    Only :data:`LOCATION_KEYS` count (a list of values gives one directory per value);
    every other override is ignored.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness import grid
    from harness.config import check_group_overrides, compose_config

    parsed = OverridesParser.create().parse_overrides([o for o in overrides if "=" in o])
    jobs = grid.expand([o for o in parsed if o.key_or_group in LOCATION_KEYS and not o.is_delete()])
    check_group_overrides([item for job in jobs for item in job])
    dirs = [sweep_dir(compose_config(job)) for job in jobs]
    return list(dict.fromkeys(dirs))


def resolved_config(cfg: Any) -> dict[str, Any]:
    """The job config as a plain dict, interpolations resolved, without Hydra's node."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return container


def config_hash(cfg: Any) -> str:
    """Digest of the resolved config minus keys that do not change the results."""
    return config_digest(resolved_config(cfg))


def config_digest(config: dict[str, Any]) -> str:
    """:func:`config_hash` of a resolved config (a stored run's ``config``)."""
    hashed = {k: v for k, v in config.items() if k not in UNHASHED_KEYS}
    for path, default in LATER_KEYS.items():
        *parents, key = path.split(".")
        group = hashed
        for parent in parents:  # copied along the path: the caller's config stays as it was
            if not isinstance(group.get(parent), dict):
                break
            group[parent] = dict(group[parent])
            group = group[parent]
        else:
            if key in group and group[key] == default:
                del group[key]
    return json_digest(hashed)


class IncompleteRun(Exception):
    """A job directory whose results are not complete; the message is the reason."""


def complete_summary(job_dir: Path) -> dict[str, Any]:
    """The summary of a complete job: ``summary.json`` marked complete, and a
    ``requests.parquet`` with the summary's number of rows that reads back whole (its
    sha256 is the one the summary records; a summary written before the digest existed
    has its table read in full instead).

    Raises:
        IncompleteRun: the reason the job is partial or corrupt.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = job_dir / SUMMARY
    if not path.is_file():
        raise IncompleteRun(f"partial: no {SUMMARY}")
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IncompleteRun(f"corrupt {SUMMARY}: {e}") from None
    if not isinstance(summary, dict) or summary.get("complete") is not True:
        raise IncompleteRun(f"partial: {SUMMARY} is not marked complete")
    requests = job_dir / REQUESTS
    if not requests.is_file():
        raise IncompleteRun(f"no {REQUESTS}")
    digest = summary.get(REQUESTS_SHA256)
    try:
        rows = pq.read_metadata(requests).num_rows
        if rows == summary.get("num_requests") and digest is None:
            rows = pq.read_table(requests).num_rows  # no digest: read it whole
    except (OSError, pa.ArrowException) as e:
        raise IncompleteRun(f"corrupt {REQUESTS}: {e}") from None
    if rows != summary.get("num_requests"):
        raise IncompleteRun(f"{rows} request rows but {SUMMARY} says {summary.get('num_requests')}")
    if digest is not None and file_digest(requests, None) != digest:
        raise IncompleteRun(f"corrupt {REQUESTS}: its sha256 is not the one {SUMMARY} records")
    return summary


def read_summary(job_dir: Path) -> dict[str, Any] | None:
    """:func:`complete_summary`, or None when the job is not complete."""
    try:
        return complete_summary(job_dir)
    except IncompleteRun:
        return None


def changed_parts(job_dir: Path, run_key: dict[str, str]) -> list[str] | None:
    """The parts of ``run_key`` that differ from the stored complete run's (parts either
    side lacks count as changed); None when there is no complete run. The stored run's
    ``config`` part is its stored config hashed as today (:data:`UNHASHED_KEYS` may grow)."""
    summary = read_summary(job_dir)
    if summary is None:
        return None
    stored = dict(summary.get("run_key") or {})
    if isinstance(summary.get("config"), dict) and "config" in stored:
        stored["config"] = config_digest(summary["config"])
    return [p for p in {**stored, **run_key} if stored.get(p) != run_key.get(p)]


def write_job(
    job_dir: Path,
    records: Sequence[RequestRecord],
    summary: RunSummary,
    hydra_dir: Path | None = None,
) -> None:
    """Write requests.parquet, summary.json (with the table's sha256) and the Hydra config,
    atomically replacing ``job_dir``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([r.to_row() for r in records], schema=request_schema())
    with atomic_dir(job_dir) as tmp:
        pq.write_table(table, tmp / REQUESTS)
        row = {**summary.to_row(), REQUESTS_SHA256: file_digest(tmp / REQUESTS, None)}
        (tmp / SUMMARY).write_text(json.dumps(row, indent=2) + "\n")
        if hydra_dir is not None and hydra_dir.is_dir():
            shutil.copytree(hydra_dir, tmp / ".hydra")


LOCK = ".lock"
_held: dict[Path, int] = {}  # sweep dir -> open lock file descriptor (held until exit)


def lock_sweep(sweep: Path) -> None:
    """Take ``<sweep>/.lock`` for this process (the kernel drops it when the process dies).

    Raises:
        ConfigError: the directory cannot be written, or another live process holds the
            lock (named by pid, host and start time).
    """
    import fcntl
    import socket

    from harness.config import ConfigError

    sweep = sweep.resolve()
    if sweep in _held:
        return
    try:
        sweep.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=sweep).close()  # new entries, not only the lock file
        fd = os.open(sweep / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"results_dir: cannot write {sweep} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(
            f"{sweep}: another sweep is writing here ({holder}); wait for it or use sweep=<name>"
        ) from None
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode())
    _held[sweep] = fd


def append_failure(sweep: Path, job: str, config_hash: str, error: BaseException) -> None:
    """Add one line about a failed job to ``failures.jsonl``."""
    sweep.mkdir(parents=True, exist_ok=True)
    line = {
        "job": job,
        "config_hash": config_hash,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "error": f"{type(error).__name__}: {error}",
    }
    with (sweep / FAILURES).open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
