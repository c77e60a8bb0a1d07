"""Digests and atomic writes: the one sha256 of JSON values and of files, and the one way
a file or directory appears whole or not at all. Imports nothing of the project."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def json_digest(
    obj: Any,
    *,
    length: int | None = 16,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """The first ``length`` hex characters (None: all) of the sha256 of ``obj`` as JSON with
    sorted keys.

    ``ensure_ascii`` and ``default`` change the bytes hashed: a caller whose digests are
    stored (cache keys, run keys) keeps the settings its stored digests were made with.
    """
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=ensure_ascii, default=default)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def key_digest(obj: Any) -> str:
    """The digest of model cache keys and run keys: :func:`json_digest` with the settings
    they were first made with (non-ASCII kept as is, other values as ``str``)."""
    return json_digest(obj, ensure_ascii=False, default=str)


def file_digest(path: str | Path, length: int | None = 16) -> str:
    """The first ``length`` hex characters (None: all) of the sha256 of a file's bytes."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:length]


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: readers see the old file or the new
    one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def replace_dir(tmp: str | Path, path: str | Path) -> None:
    """Put the finished directory ``tmp`` at ``path``, replacing what is there (the old one
    is moved aside first, so ``path`` is never half old and half new)."""
    tmp, path = Path(tmp), Path(path)
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """An empty temporary directory beside ``path`` that replaces ``path`` when the block
    ends without an error (on an error ``path`` stays as it was; the next attempt clears
    the temporary one)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    replace_dir(tmp, path)
