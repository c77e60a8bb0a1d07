"""Where a job's results live and how they are written and found.

``<results_dir>/<sweep>/<job>/`` holds ``requests.parquet`` (the tidy request table),
``summary.json`` (``"complete": true``) and ``.hydra/`` (the job's Hydra config). A job
directory is written in a hidden temp directory and renamed into place, so a killed
job leaves nothing behind. A job whose complete results carry the same config hash is
skipped on re-run. Failed jobs are appended to ``<results_dir>/<sweep>/failures.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.records import RequestRecord, RunSummary, request_columns

SUMMARY = "summary.json"
REQUESTS = "requests.parquet"
FAILURES = "failures.jsonl"
# Keys that do not change what a job computes: left out of the config hash.
UNHASHED_KEYS = ("force", "plan", "results_dir", "sweep")


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
    """Readable, unique-per-sweep name: ``<variant>-<dataset>-k<K>-c<conc>-s<seed>-t<temp>-n<limit>``."""
    limit = "all" if cfg.limit is None else cfg.limit
    return (
        f"{cfg.variant.name}-{cfg.dataset.name}-k{cfg.spec.k}-c{cfg.concurrency}"
        f"-s{cfg.seed}-t{cfg.temperature:g}-n{limit}"
    )


def sweep_dir(cfg: Any) -> Path:
    """``<results_dir>/<sweep>``."""
    return Path(cfg.results_dir) / cfg.sweep


def resolved_config(cfg: Any) -> dict[str, Any]:
    """The job config as a plain dict, interpolations resolved, without Hydra's node."""
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return container


def config_hash(cfg: Any) -> str:
    """Digest of the resolved config minus keys that do not change the results."""
    config = {k: v for k, v in resolved_config(cfg).items() if k not in UNHASHED_KEYS}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def read_summary(job_dir: Path) -> dict[str, Any] | None:
    """The job's summary if it is complete, else None."""
    try:
        summary = json.loads((job_dir / SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    complete = summary.get("complete") is True and (job_dir / REQUESTS).is_file()
    return summary if complete else None


def is_complete(job_dir: Path, config_hash: str) -> bool:
    """True when the job's complete results were computed from the same config."""
    summary = read_summary(job_dir)
    return summary is not None and summary.get("config_hash") == config_hash


def write_job(
    job_dir: Path,
    records: Sequence[RequestRecord],
    summary: RunSummary,
    hydra_dir: Path | None = None,
) -> None:
    """Write requests.parquet, summary.json and the Hydra config, atomically replacing ``job_dir``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parent, name = job_dir.parent, job_dir.name
    parent.mkdir(parents=True, exist_ok=True)
    for stale in [*parent.glob(f".tmp-{name}-*"), *parent.glob(f".old-{name}-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    tmp, old = parent / f".tmp-{name}-{os.getpid()}", parent / f".old-{name}-{os.getpid()}"
    tmp.mkdir()
    table = pa.Table.from_pylist([r.to_row() for r in records], schema=request_schema())
    pq.write_table(table, tmp / REQUESTS)
    (tmp / SUMMARY).write_text(json.dumps(summary.to_row(), indent=2) + "\n")
    if hydra_dir is not None and hydra_dir.is_dir():
        shutil.copytree(hydra_dir, tmp / ".hydra")
    if job_dir.exists():
        job_dir.rename(old)
    tmp.rename(job_dir)
    shutil.rmtree(old, ignore_errors=True)


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
