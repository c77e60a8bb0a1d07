"""Shared fixtures: a tiny random target/draft pair and job overrides that point at it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The files that take longest (real engines, training, figures), longest first: `make test`
# hands whole files to its workers in collection order, so these start first and the quick
# files fill the end. Only an ordering hint: a file missing here sorts with the other slow
# ones (or the quick ones).
LONGEST = (
    "test_sweep_cli.py",
    "test_train_pipeline.py",
    "test_eagle3.py",
    "test_server.py",
    "test_cli_faults.py",
    "test_preflight.py",
    "test_reports_report.py",
    "test_engine.py",
    "test_bench_drafts.py",
    "test_smollm2.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist (`make test` runs two workers on a 2-core machine) each worker gets its
    share of the cores, for the engines and runs it starts and for its own torch:

    - vLLM's CPU engines bound to the worker's cores (``VLLM_CPU_OMP_THREADS_BIND``): its
      ``auto`` placement binds every engine's model to core 0 (keeping core 1 for the engine
      core), so both workers' engines queued on core 0;
    - that many torch (OpenMP) threads (``OMP_NUM_THREADS``): torch's default of a thread per
      core oversubscribes the cores and its threads wait on each other (an EAGLE-3 head
      trained in a fixture took 6x as long on a loaded machine); code that fixes its own
      thread count (``train.build``'s ``threads``) still sets it.

    Tests that set either variable themselves still do (monkeypatch). In one process
    (``-n 0``) both stay as they are: vLLM's ``auto`` is the fastest placement of one engine
    (docs/PAIRING.md). And the controller hands out files in collection order
    (``--no-loadscope-reorder``): xdist would otherwise start with the files that have the
    most tests, leaving the long engine files (few tests each) for the end, one worker idle
    while the other finishes one."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None or workers < 2:
        return
    cores = sorted(os.sched_getaffinity(0))
    index = int(worker.removeprefix("gw"))
    share = cores[index * len(cores) // workers : (index + 1) * len(cores) // workers]
    share = share or [cores[index % len(cores)]]  # more workers than cores
    env = pytest.MonkeyPatch()
    env.setenv("OMP_NUM_THREADS", str(len(share)))
    env.setenv("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, share)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The LONGEST files first, then the other files with slow tests, then the rest; each
    file's tests stay together in their own order (the sort is stable)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.path.name in LONGEST:
            return 0, LONGEST.index(item.path.name)
        return (1 if item.path in slow else 2), 0

    items.sort(key=rank)


# Loaded by vLLM's ngram proposer (numba). Once it is in a process, every later vLLM engine
# started in that process fails: vLLM's kernel registration scans each module's objects with
# vars(), and llvmlite's library wrapper answers `__dict__` with a wrapped C function
# ("'_lib_fn_wrapper' object has no attribute 'get'").
LLVMLITE = "llvmlite.binding.ffi"


@pytest.fixture(autouse=True)
def _llvmlite_stays_out(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that leaves llvmlite loaded in the test process (an ngram engine started in
    it) fails here by name; the later engines of its worker still fail, but the cause is
    named first."""
    loaded = LLVMLITE in sys.modules
    yield
    if not loaded and LLVMLITE in sys.modules:
        pytest.fail(
            f"{request.node.nodeid} loaded {LLVMLITE} into the test process, which breaks "
            "every later vLLM engine started in it (Speculator.needs_multiprocessing)"
        )


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A random 2x128 target and 1x64 draft with one shared local tokenizer (seconds)."""
    from train.tiny import build_random_pair

    return build_random_pair(tmp_path_factory.mktemp("tiny_pair"))


@pytest.fixture
def tiny_overrides(request: pytest.FixtureRequest, tiny_pair, tmp_path) -> list[str]:
    """Overrides for a short job on the tiny pair (variants cot / cot_sd), results in tmp_path,
    one engine per job (``pairing=sequential``); engines in processes of their own for the
    tests marked ``engine_processes``."""
    target, draft = tiny_pair
    return [
        f"models.targets.cot={target}",
        f"models.drafts.cot={draft}",
        f"results_dir={tmp_path / 'results'}",
        "limit=3",
        "max_tokens=24",
        "pairing=sequential",  # one engine per job; the tests of pairing ask for interleaved
        *(
            ["engine.multiprocessing=true"]
            if request.node.get_closest_marker("engine_processes")
            else []
        ),
    ]


@pytest.fixture
def unrasterized(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures built, laid out and drawn, but not rasterized: each ``savefig`` leaves an
    empty file at its path (a third of a report's time). For the tests that read a report's
    text, tables and figure names, not its pixels; ``reports.plotting.finish`` has already
    drawn every artist (``draw_without_rendering``), so a figure that fails to draw still
    fails there. The tests that read the pixels save them for real."""
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, path, **kwargs: Path(path).touch())
