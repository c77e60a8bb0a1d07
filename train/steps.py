"""The steps a build is made of, shared by :mod:`train.build` and the family trainers.

A model ready to train from or to serve is a :class:`Built` (its directory and cache key);
:func:`cached` says whether a build with a key is already there, :func:`train_model` is one
SFT run. A speculator family's trainer (its ``trained_by``, a module of ``train/``) exposes
``build(target: TrainedTarget) -> dict[str, str]``: the speculators it builds for one trained
target, by role.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.files import replace_dir, write_text
from harness.manifest import (
    Manifest,
    build_key,
    data_hash,
    is_current,
    weights_digest,
    write_manifest,
)
from train.config import SFTSettings, TrainConfig


@dataclass(frozen=True)
class Built:
    """A model ready to train from or to serve: a directory (or hub id) and its cache key."""

    path: str
    key: str


@dataclass(frozen=True)
class TrainedTarget:
    """What a family's trainer builds from: one style's trained target and its training rows,
    the experiment's draft paths (``models.drafts``) and its base draft (None: none)."""

    cfg: TrainConfig
    style: str
    model: Built
    rows: dict[str, list[dict]]  # the style's training rows by difficulty
    drafts: dict[str, str]
    base_draft: Built | None


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` atomically."""
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def flat(by_difficulty: dict[str, list[dict]], cap: int | None = None) -> list[dict]:
    """The rows of every difficulty, at most ``cap`` of each."""
    return [r for rows in by_difficulty.values() for r in rows[:cap]]


def cached(
    role: str, parent: Built, rows: list[dict], config: dict, out_dir: str
) -> tuple[Built, bool]:
    """The model ``out_dir`` trained from ``parent`` on ``rows`` with ``config`` (its cache
    key), and whether a build with that key is already there."""
    built = Built(str(out_dir), build_key(parent.key, data_hash(rows), config))
    current = is_current(Path(out_dir), built.key)
    if current:
        print(f"[build] {role}: up to date ({out_dir})", flush=True)
    return built, current


def train_model(
    role: str,
    parent: Built,
    rows: list[dict],
    val_rows: list[dict] | None,
    settings: SFTSettings,
    out_dir: str,
    cfg: TrainConfig,
    vocab_size: int | None = None,
    teacher: Built | None = None,
) -> Built:
    """SFT ``parent`` on ``rows`` into ``out_dir`` unless a build with the same key is there.

    ``vocab_size`` pads the model's embeddings to that many rows; ``teacher`` is the model
    whose distributions objective ``kl`` learns (see :func:`train.sft.sft`).
    """
    from train.merge import merge_lora
    from train.sft import sft

    # the thread count changes float reductions, so it is part of what a build is
    config = asdict(settings) | {"threads": cfg.threads}
    config |= {"vocab_size": vocab_size} if vocab_size else {}
    teacher = teacher if settings.objective == "kl" else None
    config |= {"teacher": teacher.key} if teacher else {}
    built, current = cached(role, parent, rows, config, out_dir)
    if current:
        return built
    key, out = built.key, Path(out_dir)
    print(f"[build] {role}: training on {len(rows)} examples from {parent.path}", flush=True)
    start = time.perf_counter()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    work = Path(cfg.work_dir) / f"{role}-{key}"
    trained = tmp if settings.lora is None else work / "adapter"
    result = sft(
        parent.path, rows, trained, settings, cfg, work, val_rows, vocab_size,
        teacher.path if teacher else None,
    )  # fmt: skip
    if settings.lora is not None:  # fold the adapter into the parent's weights
        merge_lora(parent.path, trained, tmp, cfg)
    method = "lora" if settings.lora else "full"
    manifest = Manifest(
        role=role,
        method=method,
        trained_from=parent.path,
        key=key,
        data_hash=data_hash(rows),
        config=config,
        steps=result.steps,
        final_loss=result.final_loss,
        eval_loss=result.eval_loss,
        train_seconds=round(result.train_seconds, 1),
        examples=len(rows),
        weights=weights_digest(tmp),
    )
    write_manifest(tmp, manifest)
    replace_dir(tmp, out)
    print(
        f"[build] {role}: {result.steps} steps, loss {result.final_loss:.3f}, "
        f"{time.perf_counter() - start:.0f} s -> {out}",
        flush=True,
    )
    return Built(str(out), key)
