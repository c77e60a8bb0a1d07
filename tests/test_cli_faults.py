"""The CLIs under bad input and faults: one line naming the cause, exit 2, no engine left behind.

Fast tests fail before any engine starts; the ``slow`` ones run the real engine on the
tiny pair and kill, interrupt or race it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_reaper import all_gone, engine_core_started

from harness import results
from tests import cli

pytestmark = pytest.mark.engine_processes  # what becomes of an engine's processes


def _harness(*args: str) -> subprocess.CompletedProcess:
    return cli.run("harness", *args)


def _one_error(run: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line of a run that exited with 2."""
    lines = [x for x in run.stderr.strip().splitlines() if not x.startswith("Triton")]
    assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("spec.k=abc", "error: spec.k=abc: expected an integer"),
        ("limit=abc", "error: limit=abc: expected an integer or null"),
        ("seed=abc", "error: seed=abc: expected an integer"),
        ("spec.kk=3", "error: spec.kk=3: unknown key (spec has k,"),
        ("foo=1", "error: foo=1: unknown key (the config has experiment,"),
        ("+foo=1", "error: foo=1: unknown key"),
        ("+spec.k=3", "error: +spec.k=3: spec.k exists; set it without +"),
        ("repeat=5", "error: repeat=5: set by the harness for each of repeats=N runs"),
        ("~spec.k", "error: ~spec.k: keys cannot be deleted; set a value instead"),
        ("sweep=../../escaped", "error: sweep=../../escaped: must be a folder name inside"),
        ("temperature=inf", "error: temperature=inf: must be a finite number >= 0"),
        ("hydra.foo=1", "error: hydra.foo=1: Key 'foo' not in 'HydraConf'"),
    ],
)
def test_type_errors_and_unknown_keys_are_one_line(override, message, tmp_path):
    assert _one_error(_harness(override, f"results_dir={tmp_path}")).startswith(message)


@pytest.mark.parametrize("multirun", [(), ("-m", "dataset=synth_easy", "spec.k=0")])  # 1 job
@pytest.mark.parametrize(
    "override", ["sweep=../../escaped", "pairing=banana", "request_rate=-1", "limit=0"]
)
def test_a_refused_value_writes_nothing(override, multirun, tmp_path):
    results_dir = tmp_path / "a" / "r"
    run = _harness(*multirun, "variant=cot", override, f"results_dir={results_dir}")
    assert _one_error(run).startswith(f"error: {override.split('=')[0]}=")
    assert list(tmp_path.rglob("*")) == []  # no lock, no .hydra/, inside or outside


def test_an_empty_results_dir_is_refused_and_writes_nothing(tmp_path):
    run = cli.run("harness", "variant=cot", "results_dir=", cwd=tmp_path)
    assert (
        _one_error(run) == "error: results_dir=: must name a folder (runs go to results_dir/sweep)"
    )
    assert list(tmp_path.rglob("*")) == []  # not ./tiny/ in the current directory


@pytest.mark.parametrize(
    ("key", "mode"),
    [("hydra.run.dir", ()), ("hydra.sweep.dir", ("-m",)),
     ("hydra.job_logging.handlers.file.filename", ())],
)  # fmt: skip
def test_hydra_overrides_that_write_outside_results_dir_are_refused(key, mode, tmp_path):
    outside = tmp_path / "outside"
    run = cli.run("harness", *mode, "variant=cot", f"{key}={outside}",
                  f"results_dir={tmp_path / 'r'}", "plan=true", cwd=tmp_path)  # fmt: skip
    assert _one_error(run) == (
        f"error: {key}={outside}: Hydra's files go under results_dir/<sweep>/.hydra; "
        "set results_dir and sweep instead"
    )
    assert list(tmp_path.rglob("*")) == []


def test_a_value_hydra_cannot_read_says_how_to_quote_it(tiny_overrides):
    line = _one_error(_harness(*tiny_overrides, "variant=cot", "sweep=ü"))
    assert line == (
        "error: sweep=ü: Hydra cannot read this value unquoted; for text, quote it: 'sweep=\"ü\"'"
    )
    quoted = _harness(*tiny_overrides, "variant=cot", 'sweep="ü"', "plan=true")
    assert quoted.returncode == 0, quoted.stderr[-2000:]


def test_tracking_mlflow_without_mlflow_is_refused_before_anything_runs(tmp_path):
    # a fresh interpreter in which mlflow cannot be found, as where it is not installed
    shim = ("import runpy, sys; sys.modules['mlflow'] = None; sys.argv[0] = 'harness'; "
            "runpy.run_module('harness', run_name='__main__', alter_sys=True)")  # fmt: skip
    run = subprocess.run([sys.executable, "-c", shim, "variant=cot", "tracking=mlflow",
                          f"results_dir={tmp_path}"], capture_output=True, text=True)  # fmt: skip
    assert _one_error(run) == (
        "error: tracking=mlflow: the mlflow package is not installed; run `make install-tracking`"
    )
    assert list(tmp_path.rglob("*")) == []


def test_an_existing_sweep_directory_that_takes_no_new_files_is_one_line(tmp_path):
    sweep = tmp_path / "tiny"
    sweep.mkdir()
    (sweep / results.LOCK).touch()  # an earlier sweep's lock file: only new entries fail
    # root ignores permission bits: the immutable flag stops it (chattr, ext4 and others)
    seal, unseal = (["chattr", "+i"], ["chattr", "-i"]) if os.geteuid() == 0 else (
        ["chmod", "555"], ["chmod", "755"])  # fmt: skip
    if subprocess.run([*seal, str(sweep)], capture_output=True).returncode:
        pytest.skip(f"{seal[0]} cannot seal {sweep} here")
    try:
        run = _harness("variant=cot", f"results_dir={tmp_path}")
        multirun = _harness("-m", "variant=cot", "dataset=synth_easy", "spec.k=0",
                            f"results_dir={tmp_path}")  # fmt: skip
    finally:
        subprocess.run([*unseal, str(sweep)], check=True)
    for bad in (run, multirun):
        assert _one_error(bad).startswith(f"error: results_dir: cannot write {sweep} (")


def test_calibrate_checks_what_the_harness_checks_before_any_engine(tiny_pair, tmp_path):
    run = cli.run("harness.sweep.calibrate", f"models.targets.cot={tiny_pair[0]}",
                  "models.drafts.cot=/nonexistent", "variant=cot_sd", "spec.k=1",
                  f"results_dir={tmp_path}")  # fmt: skip
    assert _one_error(run) == "error: models.drafts.cot=/nonexistent: model directory not found"


def test_a_bad_value_inside_a_multirun_is_refused_not_dropped(tmp_path):
    run = _harness("-m", "variant=cot", "dataset=synth_easy", "spec.k=-1,0",
                   f"results_dir={tmp_path}")  # fmt: skip
    assert _one_error(run) == "error: spec.k=-1: must be >= 0 (0 = no speculation)"
    bad_type = _harness("-m", "spec.k=1,x", f"results_dir={tmp_path}")
    assert _one_error(bad_type) == "error: spec.k=x: expected an integer"


def test_a_sweep_with_nothing_to_run_says_so(tmp_path):
    run = _harness(
        "-m", "variant=cot", "dataset=synth_easy", "spec.k=1,2", f"results_dir={tmp_path}"
    )
    assert "none of its 2 combinations can run" in _one_error(run)


@pytest.mark.slow  # imports vLLM
def test_spec_k_beyond_what_vllm_accepts_is_refused(tiny_overrides):
    from vllm.v1.sample.rejection_sampler import MAX_SPEC_LEN

    big = _harness(*tiny_overrides, "variant=cot_sd", f"spec.k={MAX_SPEC_LEN + 1}")
    assert _one_error(big) == (
        f"error: spec.k={MAX_SPEC_LEN + 1}: vLLM accepts at most {MAX_SPEC_LEN} draft tokens per step"
    )
    long = _harness(*tiny_overrides, "variant=cot_sd", "spec.k=100", "engine.max_model_len=64")
    assert _one_error(long).startswith("error: spec.k=100: k draft tokens plus the bonus token")


def test_results_dir_that_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for mode in ([], ["-m", "variant=cot", "dataset=synth_easy", "spec.k=0"]):  # 1 job
        run = _harness(*mode, f"results_dir={blocker}")
        assert (
            _one_error(run) == f"error: results_dir: cannot write {blocker}/tiny (Not a directory)"
        )


def test_corrupt_model_config_is_named_not_a_tokenizer_failure(tiny_overrides, tiny_pair, tmp_path):
    target = shutil.copytree(tiny_pair[0], tmp_path / "target")
    (target / "config.json").write_text('{"vocab_size": 3,\n  oops}')
    run = _harness(*tiny_overrides, "variant=cot", f"models.targets.cot={target}")
    assert _one_error(run).startswith(f"error: {target / 'config.json'}: line 2: not valid JSON")


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_model_directory_without_weights_is_one_line_before_any_engine(
    role, tiny_overrides, tiny_pair, tmp_path
):
    model = shutil.copytree(tiny_pair[role == "draft"], tmp_path / "noweights")
    for weights in model.glob("*.safetensors"):
        weights.unlink()
    key = "models.targets.cot" if role == "target" else "models.drafts.cot"
    run = _harness(*tiny_overrides, "variant=cot_sd", "spec.k=2", f"{key}={model}")
    assert _one_error(run).startswith(f"error: {key}={model}: no model weights (*.safetensors")


@pytest.mark.slow  # builds a second tiny pair
def test_a_done_run_whose_draft_was_rebuilt_is_checked_before_the_first_job(
    tiny_overrides, tiny_pair, tmp_path
):
    """A stored complete run of the same config is done only while its models are the same:
    its draft rebuilt (another seed, so another tokenizer), the sweep refuses it before
    the first job (cot at K = 0) starts an engine, not when its own turn comes."""
    from harness.config import compose_config
    from harness.sweep.job import check_sweep, models_used, run_key
    from harness.sweep.runner import prepare
    from train.tiny import build_random_pair

    draft = shutil.copytree(tiny_pair[1], tmp_path / "draft")
    overrides = [*tiny_overrides, f"models.drafts.cot={draft}", "dataset=synth_easy"]
    cfg = compose_config([*overrides, "variant=cot_sd", "spec.k=1"])
    job = prepare(cfg)
    job_dir = results.sweep_dir(cfg) / results.job_name(cfg)
    job_dir.mkdir(parents=True)
    pq.write_table(pa.table({"problem_id": pa.array([], pa.string())}), job_dir / results.REQUESTS)
    stored = {"complete": True, "num_requests": 0, "config": results.resolved_config(cfg),
              "config_hash": results.config_hash(cfg),
              "run_key": run_key(cfg, job, models_used(cfg, job))}  # fmt: skip
    (job_dir / results.SUMMARY).write_text(json.dumps(stored))
    assert check_sweep([cfg]) == (
        "sweep: 1 of 1 runs are done and still valid (same run key): skipped"
    )
    shutil.rmtree(draft)
    shutil.copytree(build_random_pair(tmp_path / "seed1", seed=1)[1], draft)
    run = _harness("-m", *overrides, "variant=cot,cot_sd", "spec.k=0,1")
    assert _one_error(run).startswith(f"error: draft={draft}: its tokenizer differs from target")
    assert sorted(p.name for p in results.sweep_dir(cfg).iterdir()) == [".lock", job_dir.name]


def _check_dataset(path: Path) -> subprocess.CompletedProcess:
    return cli.run("harness.data.datasets", "dataset=gsm8k", f"dataset.path={path}")


GOOD_ROW = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "has no rows (empty file)"),
        (f"{GOOD_ROW}\nnot json\n".encode(), "first at line 2: not JSON (Expecting value)"),
        (f"{GOOD_ROW}\n[1, 2]\n".encode(), "first at line 2: not a JSON object"),
        (f"{GOOD_ROW}\n".encode() + b'{"question": "\xff"}\n', "line 2: not UTF-8 (byte 14"),
    ],
)
def test_dataset_file_errors_name_the_file_line_and_cause(tmp_path, content, message):
    path = tmp_path / "gsm8k.jsonl"
    path.write_bytes(content)
    error = _one_error(_check_dataset(path))
    assert str(path) in error and message in error


def test_a_dataset_path_that_reads_as_no_file_says_why(tmp_path):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    assert _one_error(_check_dataset(loop)) == f"error: dataset.path={loop}: a symlink loop"
    device = _one_error(_check_dataset(Path("/dev/zero")))
    assert device == "error: dataset.path=/dev/zero: not a regular file; name one JSONL file"
    missing = tmp_path / "missing.jsonl"
    assert _one_error(_check_dataset(missing)) == f"error: dataset.path={missing}: no such file"


def test_dataset_file_with_a_utf8_bom_loads(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + f"{GOOD_ROW}\n{GOOD_ROW}\n".encode())
    run = _check_dataset(path)
    assert run.returncode == 0 and "problems:  2" in run.stdout, run.stderr[-2000:]


# ---- real engine on the tiny pair ----------------------------------------------------


def start_harness(args: list[str]) -> subprocess.Popen:
    """``python -m harness args`` in its own session (a signal to its group reaches only it),
    with SIGINT's default action (:func:`tests.cli.ctrl_c_reaches`)."""
    command = [sys.executable, "-m", "harness", *args]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=cli.ctrl_c_reaches,
    )


def _wait_for(proc: subprocess.Popen, stream: str, marker: str, timeout: float = 400) -> str:
    """Read ``stream`` of ``proc`` until ``marker`` appears; returns what was read."""
    pipe = getattr(proc, stream)
    seen = ""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        assert time.monotonic() < deadline and proc.poll() is None, seen[-3000:]
        chunk = os.read(pipe.fileno(), 4096)
        seen += chunk.decode(errors="replace")
    return seen


JOB = "cot-synth_easy-k0-c1-s0-t0-n2"


@pytest.mark.slow
def test_ctrl_c_names_the_interrupted_job_and_keeps_finished_ones(tiny_overrides, tmp_path):
    """Also: a second sweep into the same directory is refused while this one runs, and not
    once its lock died with it (it skips the finished job)."""
    # a job of 2 answers that finishes, then one of 200 answers of 200 tokens: the interrupted
    # job would run for minutes, so the SIGINT lands in it even when its bar's first line
    # comes at the 10 s log interval
    grid = ["variant=cot", "dataset=synth_easy", "limit=2,200", "max_tokens=200",
            "calibrate=false"]  # fmt: skip
    proc = start_harness(["-m", *tiny_overrides, *grid])
    sweep = tmp_path / "results" / "tiny"
    deadline = time.monotonic() + 120
    while not ((sweep / results.LOCK).is_file() and (sweep / results.LOCK).read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    second = _harness("-m", *tiny_overrides, "variant=cot", "limit=2", "calibrate=false")
    error = _one_error(second)
    assert error.startswith(f"error: {sweep}: another sweep is writing here (pid {proc.pid} on ")
    assert " since " in error
    _wait_for(proc, "stderr", "cot-synth_easy-k0-c1-s0-t0-n200:")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    err = err.decode(errors="replace")
    assert proc.returncode == 130, err[-3000:]  # the refused sweep left it running
    # the engine's processes left the terminal's process group (harness.backends.reaper's vLLM
    # plugin), so the SIGINT reached only the harness: no engine traceback
    assert "Traceback" not in err, err[-3000:]
    assert (
        f"interrupted: job cot-synth_easy-k0-c1-s0-t0-n200 stopped; finished jobs are kept in "
        f"{sweep}" in err
    )
    assert results.read_summary(sweep / JOB) is not None  # the job of 2 answers
    again = _harness(*tiny_overrides, *grid[:2], "limit=2", *grid[3:])  # the lock died with it
    assert again.returncode == 0 and f"skip {JOB}" in again.stdout


@pytest.mark.slow
def test_ctrl_c_during_engine_start_up_stops_the_harness_and_its_engine(tiny_overrides):
    proc = start_harness([*tiny_overrides, "variant=cot", "calibrate=false"])
    deadline = time.monotonic() + 120
    while not engine_core_started(proc.pid):  # vLLM's engine process is up; LLM(...) builds
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    err = err.decode(errors="replace")
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "interrupted: job cot-synth_easy-k0-c1-s0-t0-n3 stopped" in err
    assert all_gone(tree, 15) == []


@pytest.fixture
def nearly_full_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs with 24 KiB free: room for the lock and Hydra's files, not for a job's
    results (root mounts it; elsewhere the test is skipped)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (disk / "filler").write_bytes(b"\0" * 1000 * 1024)
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("-m",)])
def test_a_full_disk_is_one_line_naming_the_folder(mode, tiny_overrides, nearly_full_disk):
    run = cli.run("harness", *mode, *tiny_overrides, "variant=cot",
                  f"results_dir={nearly_full_disk}", "calibrate=false", timeout=900)  # fmt: skip
    sweep = nearly_full_disk / "tiny"
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith(("error", "Error"))]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot write {sweep}"), errors
    assert errors[0].endswith("(No space left on device)")
    assert "failures.jsonl" not in run.stderr  # not pointed to: it cannot be written either


@pytest.mark.slow
def test_a_results_dir_that_vanishes_mid_sweep_does_not_take_the_sweep_down(
    tiny_overrides, tmp_path
):
    # a job of 2 answers that finishes, then one of 80 answers of 200 tokens: the second job
    # outlasts the bar's 10 s log interval (about 16,000 tokens; 24 answers took under 10 s
    # with the engine in the harness's process), so the move lands in it even when the
    # job's first line comes at that interval
    grid = ["variant=cot", "dataset=synth_easy", "limit=2,80", "max_tokens=200",
            "calibrate=false"]  # fmt: skip
    proc = start_harness(["-m", *tiny_overrides, *grid])
    _wait_for(proc, "stderr", "cot-synth_easy-k0-c1-s0-t0-n80:")
    sweep = tmp_path / "results" / "tiny"
    sweep.rename(tmp_path / "moved")
    sweep.write_text("not a directory any more")
    _, err = proc.communicate(timeout=300)
    err = err.decode(errors="replace")
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    second = sweep / "cot-synth_easy-k0-c1-s0-t0-n80"
    assert f"could not write the results to {second}" in err
    assert f"could not record its failure in {sweep / results.FAILURES}" in err
    assert results.read_summary(tmp_path / "moved" / "cot-synth_easy-k0-c1-s0-t0-n2") is not None
