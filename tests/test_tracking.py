"""tracking=mlflow: a real job logged to MLflow's SQLite store, a report as artifacts, and a
tracker that is down costing one warning line, never the job."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import results, tracking
from harness.backends import engine as engines
from harness.config import ConfigError, compose_config, validate
from harness.sweep.job import run_job

mlflow = pytest.importorskip("mlflow")  # make test installs it (make install-tracking)
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _runs(store: str, experiment: str) -> list:
    client = mlflow.tracking.MlflowClient(store)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


def test_a_finished_job_is_logged_with_its_config_metrics_and_provenance(tiny_overrides, tmp_path):
    cfg = compose_config([*tiny_overrides, "variant=cot", "spec.k=0", "tracking=mlflow"])
    summary = run_job(cfg, progress=False)
    engines.clear()
    store = tracking.uri(None, cfg.results_dir)
    assert store.startswith("sqlite:///") and (Path(cfg.results_dir) / tracking.DB).is_file()
    (run,) = _runs(store, cfg.sweep)
    assert run.info.run_name == summary.job.run_id
    assert run.data.params["spec.k"] == "0" and run.data.params["variant.name"] == "cot"
    assert run.data.params["max_tokens"] == str(cfg.max_tokens)
    assert run.data.tags["config_hash"] == summary.config_hash
    assert run.data.tags["run_key.problems"] == summary.run_key["problems"]
    assert run.data.tags["git.commit"] == str(summary.git["commit"])
    assert run.data.tags["versions.vllm"] == summary.versions["vllm"]
    m = run.data.metrics
    assert 0 <= m["accuracy"] <= 1 and m["tpot_ms"] > 0 and m["output_tokens_per_s"] > 0
    assert "speedup_tpot" not in m  # sequential: no pair to divide by
    # tracking never enters the run key: the same job with tracking off is reused
    plain = compose_config([*tiny_overrides, "variant=cot", "spec.k=0"])
    assert results.config_hash(plain) == summary.config_hash
    assert run_job(plain, progress=False) is None

    done = subprocess.run(
        [sys.executable, "-m", "reports", "--results-dir", cfg.results_dir, "--sweep", cfg.sweep,
         "--out-dir", str(tmp_path / "reports"), "--bootstrap", "20", "tracking=mlflow"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (report,) = [r for r in _runs(store, cfg.sweep) if r.info.run_name == tracking.SWEEP_RUN]
    names = {a.path for a in mlflow.tracking.MlflowClient(store).list_artifacts(report.info.run_id)}
    assert {"REPORT.md", "figures"} <= names
    artifacts = Path(cfg.results_dir) / tracking.ARTIFACTS / cfg.sweep
    assert list(artifacts.rglob("REPORT.md")) and not (ROOT / "mlruns").exists()


def test_a_tracker_that_is_down_is_one_warning_and_the_job_completes(
    tiny_overrides, tmp_path, capsys
):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    cfg = compose_config(
        [*tiny_overrides, "variant=cot", "spec.k=0", "tracking=mlflow", f"tracking.uri={url}"]
    )
    summary = run_job(cfg, progress=False)
    engines.clear()
    assert results.complete_summary(results.sweep_dir(cfg) / results.job_name(cfg))
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("warning: tracking:")]
    assert len(warnings) == 1, "\n".join(err[-40:])
    assert warnings[0].startswith(f"warning: tracking: {summary.job.run_id} not logged to {url}")


def test_an_unknown_tracker_is_one_line():
    with pytest.raises(ConfigError, match=r"tracking\.name=wandb2"):
        validate(compose_config(["tracking.name=wandb2"]))
