"""bench/drafts.py: candidate drafts compared from a K = 0 run, on real engines."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import results
from harness.backends import engine as engines
from harness.config import compose_config
from harness.measure import preflight
from tests import cli

ROOT = Path(__file__).resolve().parent.parent


def _bench(*args: str) -> subprocess.CompletedProcess:
    return cli.run("bench.drafts", *args, cwd=ROOT, timeout=900)


def _preflight(*args: str) -> subprocess.CompletedProcess:
    return cli.run("harness.measure.preflight", *args, cwd=ROOT, timeout=900)


def test_a_directory_that_is_not_a_k0_run_is_refused(tiny_pair, tmp_path):
    out = _bench(str(tmp_path), "--drafts", str(tiny_pair[1]), "--ks", "2")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == f"error: {tmp_path}: not a complete K = 0 run"


@pytest.mark.slow
def test_each_draft_gets_its_acceptance_costs_and_predicted_speedup(
    tiny_pair, tiny_overrides, tmp_path
):
    from harness.sweep.job import run_job

    target, draft = (str(p) for p in tiny_pair)
    cfg = compose_config([*tiny_overrides, "variant=cot", "spec.k=0"])
    try:
        run_job(cfg, progress=False)
    finally:
        engines.clear()
    run_dir = results.sweep_dir(cfg) / results.job_name(cfg)

    out = _bench(str(run_dir), "--drafts", draft, "--ks", "2")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith(f"| {draft} |"))
    _, about, k, _, acceptance, e, c, t_step_ms, speedup = (
        cell.strip() for cell in row.strip("| ").split("|")
    )
    assert (about, k) == ("1 layers, untrained", "2")
    stored = preflight.read(run_dir)[draft]  # pre-flight written under the draft's path
    assert float(acceptance) == pytest.approx(stored["ks"]["2"]["acceptance_rate"], abs=5e-4)

    # the target (reused from the run's own calibration), the draft alone and the pair at K
    records = [json.loads(p.read_text()) for p in (run_dir.parent / ".calibration").iterdir()]
    step = {
        (r["target"], r["draft"], r["k"]): r["measurements"]["1"]["per_unit_s"] for r in records
    }
    assert set(step) == {(target, None, 0), (draft, None, 0), (target, draft, 2)}
    assert float(c) == pytest.approx(step[draft, None, 0] / step[target, None, 0], abs=5e-3)
    assert float(t_step_ms) == pytest.approx(step[target, draft, 2] * 1e3, abs=0.05)
    tpot = pq.read_table(run_dir / results.REQUESTS, columns=["tpot_s"]).column(0).to_pylist()
    t_target = sum(tpot) / len(tpot)
    assert float(speedup) == pytest.approx(float(e) * t_target / step[target, draft, 2], rel=0.02)

    again = _bench(str(run_dir), "--drafts", draft, "--ks", "2")  # cached: no engine starts
    assert again.returncode == 0, again.stderr
    assert "calibration " not in again.stdout
    assert row in again.stdout.splitlines()

    # pre-flight refuses what the harness would refuse, in one line: another vocabulary
    # size, and a config.json the weights do not fit
    for key, value, message in (
        ("vocab_size", 64, "vocab_size {} differs from target"),
        ("hidden_size", 128, "its weights do not load"),
    ):
        bad = shutil.copytree(draft, tmp_path / key)
        config = json.loads((bad / "config.json").read_text())
        (bad / "config.json").write_text(json.dumps({**config, key: config[key] + value}))
        run = _preflight(str(run_dir), "--draft", str(bad), "--ks", "1")
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]
        expected = message.format(config[key] + value)
        assert lines[0].startswith(f"error: draft={bad}: ") and expected in lines[0], lines
