"""``manifest.json`` of a built model directory, and the cache key that skips rebuilds.

The key hashes everything a model depends on: the key of the model it was trained
from, the training data and the training config. A directory whose manifest carries
the same key is up to date; anything else is rebuilt (and everything downstream of it,
since their keys include this one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.files import key_digest as digest
from harness.files import write_text

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    """What a model directory was built from and how its training ended."""

    role: str  # e.g. target_cot
    # lora (adapter merged into its parent) | full (every weight trained) | eagle3 (a head
    # over its parent's hidden states, train.eagle3)
    method: str
    trained_from: str  # parent model dir or hub id ("" for a random init)
    key: str  # cache key: hash of parent key, data hash and config
    data_hash: str
    config: dict[str, Any]
    steps: int
    final_loss: float | None
    eval_loss: float | None
    train_seconds: float
    examples: int
    weights: str = ""  # weights_digest of the directory: equal for two builds of the same inputs
    # a head's conditional greedy accuracy per draft step on held-back answers
    eval_accuracy: list[float] = field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def data_hash(rows: Iterable[Mapping[str, Any]]) -> str:
    """Hash of training rows (order matters: it changes the run)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def weights_digest(model_dir: str | Path) -> str:
    """Hash of the weight files and ``tokenizer.json`` (names and bytes) of ``model_dir``."""
    root = Path(model_dir)
    h = hashlib.sha256()
    for path in sorted([*root.glob("*.safetensors"), *root.glob("tokenizer.json")]):
        h.update(path.name.encode())
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()[:16]


def build_key(parent_key: str, data: str, config: Mapping[str, Any]) -> str:
    """The cache key of what ``parent_key`` makes from ``data`` with ``config``.

    A model trained from a parent model, or a parent model's answers (distillation).
    """
    return digest({"parent": parent_key, "data": data, "config": config})


def read_manifest(model_dir: str | Path) -> Manifest | None:
    """The manifest of ``model_dir``, or None when there is none."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        return None
    return Manifest(**json.loads(path.read_text(encoding="utf-8")))


def write_manifest(model_dir: str | Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` atomically (it marks the directory complete)."""
    return write_text(Path(model_dir) / MANIFEST, json.dumps(manifest.to_row(), indent=2) + "\n")


def is_current(model_dir: str | Path, key: str) -> bool:
    """True when ``model_dir`` holds a finished build with cache key ``key``."""
    manifest = read_manifest(model_dir)
    return manifest is not None and manifest.key == key
