"""harness.files: the digests stored as cache and run keys keep their exact values (pinned
from before the callers shared one helper: a changed byte would rebuild every model and
re-run every job), and atomic writes leave the old content or the new, never a part."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from harness import files
from harness.manifest import digest
from harness.results import config_hash
from train.data import prompts_hash
from train.formats import CodBounds
from train.teachers.base import TeacherPrompts

OBJ = {"model": "Qwen/Qwen2.5-0.5B", "note": "naïve ✓", "n": [1, 2.5, None]}
PROMPTS = TeacherPrompts("Solve: $question", "Q: $question ✓", "Shorten $cot", "≤ $max_words words")


def test_stored_digests_keep_their_values():
    assert digest(OBJ) == "edb3b9208ef82096"  # manifest keys: ensure_ascii=False
    assert PROMPTS.digest() == "5e4f5c0cf5ad89a3"
    config = OmegaConf.create({**OBJ, "results_dir": "x", "force": True})
    assert config_hash(config) == "b9bd0e983dcd6025"
    cfg = SimpleNamespace(
        teacher_prompts=lambda: PROMPTS, cod=CodBounds(min_steps=3, max_steps=5, max_words=5)
    )
    system = {"cot": "Think step by step.", "cod": "Be brief — 5 words."}
    assert prompts_hash(cfg, system) == "6151650f14344fe4"


def test_digest_settings_change_the_bytes_hashed():
    assert files.json_digest(OBJ, ensure_ascii=False) == digest(OBJ)
    assert files.json_digest(OBJ) != digest(OBJ)
    assert files.json_digest({"b": 1, "a": 2}) == files.json_digest({"a": 2, "b": 1})
    assert len(files.json_digest(OBJ, length=None)) == 64
    with pytest.raises(TypeError):
        files.json_digest({"p": Path("a")})
    assert files.json_digest({"p": Path("a")}, default=str) == files.json_digest({"p": "a"})


def test_file_digest(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    full = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert files.file_digest(path, length=None) == full
    assert files.file_digest(path) == full[:16]


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "a.json"
    files.write_text(path, "old ✓")
    files.write_text(path, "new")
    assert path.read_text(encoding="utf-8") == "new"
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


def test_atomic_dir_replaces_on_success_and_keeps_the_old_on_error(tmp_path):
    path = tmp_path / "model"
    with files.atomic_dir(path) as tmp:
        (tmp / "w").write_text("1")
    with pytest.raises(RuntimeError), files.atomic_dir(path) as tmp:
        (tmp / "w").write_text("2")
        raise RuntimeError("half-written")
    assert (path / "w").read_text() == "1"
    with files.atomic_dir(path) as tmp:  # clears the failed attempt's leftovers
        assert not any(tmp.iterdir())
        (tmp / "x").write_text("3")
    assert sorted(p.name for p in path.iterdir()) == ["x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
