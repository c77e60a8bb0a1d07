"""The calibration record: what one file is about (:class:`Entry`), its identity and cache
key, the file format, and the one reader of a sweep's files (:func:`load`, :func:`table`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import provenance, schedule, speculators
from harness.calibration.timing import (
    OUTPUT_TOKENS,
    PAIRED_ROUNDS,
    PROMPT_TOKENS,
    REQUESTS_PER_SLOT,
)
from harness.checks import looks_local
from harness.files import json_digest, write_text

CALIBRATION = ".calibration"  # <results_dir>/<sweep>/.calibration/ (hidden: not a run)
UNDRAFTED_STEPS = "timed apart, checked against noise"  # in a model-free proposer's identity
K0_LEVELS = "timed per token"  # in a K schedule's identity (``timing.without_drafts``)


@dataclass(frozen=True)
class Entry:
    """What one calibration file is about: an engine spec under the sweep's model names."""

    target: str  # the job's ``target`` column (the draft's name for a draft-as-target entry)
    draft: str | None  # the job's ``draft`` column; None at K = 0 (but speculation off)
    k: int  # 0 for a plain engine or speculation off: measured per token
    spec: Any  # harness.backends.engine.EngineSpec

    @property
    def k_schedule(self) -> str | None:
        """The spec's K schedule as its label (``1-32k0``), None at one K."""
        return schedule.label(self.spec.k_schedule)


def _named(model: str) -> str:
    """A model as the identity names it: a local one relative to the checkout when inside
    it (where a checkout sits is not part of what ran), else as given (a hub id)."""
    return (looks_local(model) and provenance.in_checkout(model)) or model


def identity(entry: Entry) -> dict[str, Any]:
    """Everything the cached numbers depend on: engine arguments, models (the run key's
    identity), the calibration's settings, the installed versions and the hardware."""
    spec = entry.spec
    kwargs = spec.llm_kwargs()
    kwargs["model"] = _named(kwargs["model"])
    if "model" in kwargs.get("speculative_config", {}):
        kwargs["speculative_config"]["model"] = _named(kwargs["speculative_config"]["model"])
    ident = {
        "llm_kwargs": kwargs,
        "env": spec.env(),
        "models": {
            _named(m): provenance.model_identity(m)["digest"]
            for m in (spec.target, spec.draft)
            if m
        },
        "versions": provenance.versions(),
        "hardware": provenance.hardware(dict(spec.settings)["device"]),
        "prompt_tokens": PROMPT_TOKENS,
        "output_tokens": OUTPUT_TOKENS,
        "requests_per_slot": REQUESTS_PER_SLOT,
    }
    if not spec.multiprocessing():  # earlier files timed engines in processes of their own
        ident["multiprocessing"] = False
    if entry.k > 0:  # earlier files timed the job's baseline all before its engine, then
        # in three alternating rounds pooled
        ident["baseline"] = f"median ratio of {PAIRED_ROUNDS} alternating rounds"
    if entry.k > 0 and spec.apart_by_family():  # earlier files timed it beside a plain
        ident["beside"] = "a plain engine in processes of its own"  # engine in this process
    if entry.k > 0 and not speculators.get(spec.method).drafts_every_step:
        # steps without drafts are timed apart (earlier files charged them to verify)
        ident["undrafted_steps"] = UNDRAFTED_STEPS
    if entry.k > 0 and schedule.has_k0(spec.k_schedule):  # earlier files priced verify steps at
        ident["k0_levels"] = K0_LEVELS  # its K = 0 levels (see :func:`stale_schedule`)
    return ident


def cache_key(entry: Entry) -> str:
    """The calibration file's name: a digest of :func:`identity`."""
    return json_digest(identity(entry), default=str)


def _read(path: Path) -> dict[str, Any] | None:
    """A calibration file as written, or None when missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def save(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (keys: target, draft, k, k_schedule, identity,
    measurements: concurrency -> ``timing.Measurement`` fields and ``git``, the commit and
    tree it was measured at)."""
    return write_text(path, json.dumps(record, indent=1, default=str))


def load(path: Path) -> dict[str, Any] | None:
    """A calibration record to read numbers from, or None when missing, unreadable or
    stale (:func:`stale_schedule`)."""
    record = _read(path)
    return None if record is None or stale_schedule(record) else record


def replace_stale(path: Path, record: dict[str, Any]) -> Path:
    """Delete the other calibration files of ``record``'s target, draft, K and K schedule,
    ``path`` its own (measured before the models were rebuilt or the engine changed): a
    report reads every file."""

    def about(r: dict[str, Any]) -> tuple:
        return r["target"], r["draft"], r["k"], schedule_of(r)

    for other in path.parent.glob("*.json"):
        old = _read(other) if other != path else None
        if old is not None and about(old) == about(record):
            other.unlink()
    return path


def schedule_of(record: dict[str, Any]) -> str | None:
    """A record's K schedule label; for files written before records named it, read from
    the engine arguments in its identity."""
    if "k_schedule" in record:
        return record["k_schedule"]
    return schedule.label(_ranges(record))


def table(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per cached (engine spec, concurrency) of a sweep: target, draft, k,
    k_schedule (None at one K), concurrency, per_unit_s (seconds per token at K = 0 and
    with speculation off, per verify step with drafts at K > 0), undrafted_step_s (per
    engine step without drafts; None when none ran),
    baseline_per_unit_s (the plain target's seconds per token in the same window; None
    unless measured beside an interleaved job's baseline)."""
    rows = []
    for path in sorted((sweep_dir / CALIBRATION).glob("*.json")):
        record = load(path)
        for c, m in (record or {}).get("measurements", {}).items():
            rows.append({"target": record["target"], "draft": record["draft"],
                         "k": record["k"], "k_schedule": schedule_of(record),
                         "concurrency": int(c),
                         "per_unit_s": m["per_unit_s"],
                         "undrafted_step_s": m.get("undrafted_step_s"),
                         "baseline_per_unit_s": m.get("baseline_per_unit_s")})  # fmt: skip
    return rows


def stale_schedule(record: dict[str, Any]) -> bool:
    """A K schedule's file written before its K = 0 levels were timed per token."""
    has_k0 = record.get("k", 0) > 0 and schedule.has_k0(_ranges(record))
    return has_k0 and "k0_levels" not in record["identity"]


def _ranges(record: dict[str, Any]) -> list[list[int]]:
    """The K schedule ranges in a record's engine arguments ([] at one K)."""
    return schedule.of_llm_kwargs(record.get("identity", {}).get("llm_kwargs", {}))
