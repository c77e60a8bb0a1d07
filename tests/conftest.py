"""Shared fixtures: a tiny random target/draft pair and job overrides that point at it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A random 2x128 target and 1x64 draft with one shared local tokenizer (seconds)."""
    from train.tiny import build_random_pair

    return build_random_pair(tmp_path_factory.mktemp("tiny_pair"))


@pytest.fixture
def tiny_overrides(tiny_pair, tmp_path) -> list[str]:
    """Overrides for a short job on the tiny pair (variants cot / cot_sd), results in tmp_path,
    one engine per job (``pairing=sequential``)."""
    target, draft = tiny_pair
    return [
        f"models.targets.cot={target}",
        f"models.drafts.cot={draft}",
        f"results_dir={tmp_path / 'results'}",
        "limit=3",
        "max_tokens=24",
        "pairing=sequential",  # one engine per job; the tests of pairing ask for interleaved
    ]
