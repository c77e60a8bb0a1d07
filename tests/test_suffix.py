"""Suffix decoding through the harness on a real vLLM CPU engine (``make install-suffix``)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from harness import results

pytestmark = pytest.mark.slow


def test_suffix_decoding_is_lossless_beside_its_interleaved_baseline(tiny_overrides, tmp_path):
    pytest.importorskip("arctic_inference", reason="make install-suffix builds it")
    overrides = [o for o in tiny_overrides if not o.startswith("pairing=")]
    run = subprocess.run(
        [sys.executable, "-m", "harness", "variant=cot_suffix", "spec.k=4", "calibrate=false",
         "pairing=interleaved", *overrides],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (job,) = [p for p in (tmp_path / "results" / "tiny").iterdir() if p.name.startswith("cot_")]
    summary = results.read_summary(job)
    assert summary["method"] == "suffix" and summary["pairing"] == "interleaved"
    rows = pq.read_table(job / results.REQUESTS).to_pylist()
    assert len(rows) == 3
    # greedy: each output equals the plain engine's, whose outputs never reach this tree
    assert all(r["output_hash"] == r["pair_output_hash"] for r in rows)
    assert sum(r["num_draft_tokens"] for r in rows) > 0
    assert sum(r["num_accepted_tokens"] for r in rows) <= sum(r["num_draft_tokens"] for r in rows)
