"""vLLM engines: what determines one (EngineSpec) and how one starts and shuts down.

An engine is ``vllm.LLM(target, speculative_config={"method": ..., ...})`` built from
an :class:`EngineSpec`; the method is a speculator family of :mod:`harness.speculators`.
Seeds are per request (``SamplingParams.seed``), so they are not part of the spec. Live
engines are backends of kind :data:`OFFLINE` in the one cache, :mod:`harness.backends.live`, which
keeps, stops and starts them (:func:`get_all`: an interleaved job asks for two engines).
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness import schedule, speculators
from harness.backends import live, reaper
from harness.checks import resolve_model
from harness.errors import BackendError, first_line

# Per-step accepted/drafted arrays make rejection_tokens possible; cost: two ints per step.
SPEC_METRICS_LEVEL = "detailed"
WARMUP_TOKENS = 8
# engine settings vLLM reads from the environment (CPU only), by ``engine`` config key
ENV = {"cpu_kvcache_space_gib": "VLLM_CPU_KVCACHE_SPACE",
       "cpu_threads_bind": "VLLM_CPU_OMP_THREADS_BIND"}  # fmt: skip
_SHELL = {name: os.environ.get(name) for name in ENV.values()}  # what a spec leaves unset
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"  # 0: vLLM's engine in the calling process
TAIL_LINES = 400  # the lines of an engine's start-up output searched for the cause of a failure
DRAIN_S = 10.0  # how long a failed start's output may take to reach the harness


class EngineError(BackendError):
    """An engine that would not start; the message names its cause (vLLM's own error line)."""


@dataclass(frozen=True)
class EngineSpec:
    """Everything that determines an engine: models, K, the speculator and the engine settings."""

    target: str
    draft: str | None  # the draft model or head; None when k == 0 or the method loads none
    k: int
    settings: tuple[tuple[str, Any], ...]  # the ``engine`` config group, sorted
    method: str | None = None  # vLLM speculative method (speculators.METHODS); None at k == 0
    # the family's own keys of speculative_config (harness.speculators: Speculator.options)
    method_options: tuple[tuple[str, Any], ...] = ()
    # K by batch size (num_speculative_tokens_per_batch_size); () = k at every batch size
    k_schedule: tuple[tuple[int, int, int], ...] = ()
    synthetic_acceptance_length: float | None = None  # what-if acceptance (spec config)

    @classmethod
    def from_config(cls, cfg: Any) -> EngineSpec:
        """The spec of a composed job config (model paths resolved to absolute paths)."""
        from omegaconf import OmegaConf

        k, method = cfg.spec.k, cfg.variant.method
        draft = cfg.models.drafts[cfg.variant.draft] if k > 0 and cfg.variant.draft else None
        options = speculators.get(method).options(cfg.spec) if k > 0 else {}
        settings = OmegaConf.to_container(cfg.engine, resolve=True)
        schedule = cfg.spec.k_schedule if k > 0 else None
        return cls(
            target=resolve_model(cfg.models.targets[cfg.variant.target]),
            draft=resolve_model(draft) if draft else None,
            k=k,
            settings=tuple(sorted(settings.items())),
            method=method if k > 0 else None,
            method_options=tuple(sorted(options.items())),
            k_schedule=tuple(tuple(entry) for entry in schedule or ()),
            synthetic_acceptance_length=cfg.spec.synthetic_acceptance_length if k > 0 else None,
        )

    @classmethod
    def baseline(cls, cfg: Any) -> EngineSpec:
        """The plain engine of a job config's target: its spec at K = 0 (an interleaved
        job's baseline; a K = 0 job's own spec, whose second instance is the A/A check)."""
        from omegaconf import OmegaConf

        return cls.from_config(OmegaConf.merge(cfg, {"spec": {"k": 0}}))

    @classmethod
    def plain(cls, model: str, settings: Mapping[str, Any]) -> EngineSpec:
        """One model without a draft (k = 0); ``settings`` is the ``engine`` config group."""
        return cls(resolve_model(model), None, 0, tuple(sorted(settings.items())))

    def laid_out(self, multiprocessing: bool) -> EngineSpec:
        """This spec with ``engine.multiprocessing`` set (:meth:`multiprocessing`)."""
        s = dict(self.settings) | {"multiprocessing": multiprocessing}
        return replace(self, settings=tuple(sorted(s.items())))

    def sharing(self, engines: int) -> EngineSpec:
        """This spec as one of ``engines`` engines on the same GPUs: each with that share of
        ``gpu_memory_utilization`` (vLLM claims it per engine); unchanged on CPU."""
        s = dict(self.settings)
        if s["device"] != "cuda" or engines == 1:
            return self
        s["gpu_memory_utilization"] = s["gpu_memory_utilization"] / engines
        return replace(self, settings=tuple(sorted(s.items())))

    def k_at(self, batch: int) -> int:
        """The K this engine drafts with ``batch`` requests in flight: vLLM's own lookup of
        its K schedule (a range's K holds through a gap and the tail, capped at ``k``)."""
        return schedule.k_at(self.k_schedule, self.k, dict(self.settings)["max_num_seqs"], batch)

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` for this spec."""
        s = dict(self.settings)
        kwargs: dict[str, Any] = {
            "model": self.target,
            "dtype": s["dtype"],
            "max_model_len": s["max_model_len"],
            "gpu_memory_utilization": s["gpu_memory_utilization"],
            "tensor_parallel_size": s["tensor_parallel_size"],
            "enforce_eager": s["enforce_eager"],
            "max_num_seqs": s["max_num_seqs"],
            "enable_prefix_caching": s["enable_prefix_caching"],
            "disable_log_stats": False,  # keeps the spec_decode counters in get_metrics()
        }
        if self.k > 0:
            spec: dict[str, Any] = {
                "method": self.method or "draft_model",
                "num_speculative_tokens": self.k,
                **dict(self.method_options),
            }
            if self.synthetic_acceptance_length is not None:
                spec["rejection_sample_method"] = "synthetic"
                spec["synthetic_acceptance_length"] = self.synthetic_acceptance_length
            if self.k_schedule:
                spec["num_speculative_tokens_per_batch_size"] = [list(e) for e in self.k_schedule]
            if self.draft is not None:
                spec["model"] = self.draft
            if self.draft is not None and s.get("draft_tensor_parallel_size") is not None:
                spec["draft_tensor_parallel_size"] = s["draft_tensor_parallel_size"]
            kwargs["speculative_config"] = spec
            kwargs["per_request_spec_decode_metrics"] = SPEC_METRICS_LEVEL
        return kwargs

    def multiprocessing(self) -> bool:
        """Whether an offline engine of this spec runs in processes of its own
        (``engine.multiprocessing``, or its family needs them)."""
        needs = self.method is not None and speculators.get(self.method).needs_multiprocessing
        return dict(self.settings).get("multiprocessing", True) or needs

    def apart_by_family(self) -> bool:
        """Whether this spec runs in processes of its own only because its family needs them
        (``engine.multiprocessing=false``): its plain side is then laid out like it."""
        return self.multiprocessing() and not dict(self.settings).get("multiprocessing", True)

    def arrangement(self) -> dict[str, str]:
        """vLLM's switch for where an offline engine of this spec runs (never a server's:
        see :meth:`multiprocessing`)."""
        return {MULTIPROCESSING: "1" if self.multiprocessing() else "0"}

    def env(self) -> dict[str, str]:
        """Environment variables the engine reads at start: on CPU the KV cache size in GiB
        and the cores its threads are bound to."""
        s = dict(self.settings)
        return {env: str(s[key]) for key, env in ENV.items() if s.get(key) is not None}


def environment(spec: EngineSpec) -> dict[str, str | None]:
    """The variables of :data:`ENV` an engine of ``spec`` starts with: the spec's values,
    else the shell's (None: unset), nothing of an earlier spec's."""
    return _SHELL | spec.env()


@dataclass(frozen=True)
class Engine:
    """A live engine: its spec, the ``vllm.LLM``, its start time (s) and its process watchdog."""

    spec: EngineSpec
    llm: Any
    start_s: float
    watchdog: subprocess.Popen  # kills the engine's processes if this process is killed


def get(spec: EngineSpec) -> tuple[Engine, bool]:
    """The engine for ``spec`` and whether it was reused (:func:`get_all` of one spec)."""
    return live.get(OFFLINE, spec)


def get_all(specs: Sequence[EngineSpec]) -> list[tuple[Engine, bool]]:
    """One live engine per entry of ``specs`` (a spec listed twice gets two instances) and
    whether each was reused, by :func:`harness.backends.live.get_all`'s rule (each started engine is
    warmed up). Only the engine started last keeps vLLM's engine counters
    (``LLM.get_metrics``)."""
    return live.get_all(OFFLINE, specs)


def clear() -> None:
    """Stop every live backend (:func:`harness.backends.live.clear`) and release its memory."""
    live.clear()


def _start(spec: EngineSpec, _same: int = 0) -> Engine:
    """Start an engine for ``spec`` and warm it up."""
    from vllm import LLM, SamplingParams

    for name, value in environment(spec).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ[reaper.OWN_GROUP_ENV] = "1"
    os.environ.update(spec.arrangement())
    tic = time.perf_counter()
    before = reaper.descendants()
    watchdog = reaper.watch(reaper.tag(), before)  # before the engine's first process
    tee = _Tee()
    try:
        with _interruptible_start({pid for pid, _ in before} | {watchdog.pid}), tee:
            llm = LLM(**spec.llm_kwargs())
    except BaseException as exc:
        reaper.stop(watchdog)
        reaper.reap(reaper.descendants() - before)  # what a failed or interrupted start left
        if not isinstance(exc, Exception):
            raise
        cause = failure_cause(tee.output()) or first_line(exc)
        draft = f" with draft {spec.draft}" if spec.draft else ""
        raise EngineError(
            f"vLLM could not start an engine of {spec.target}{draft}: {cause}"
        ) from None
    warmup = SamplingParams(temperature=0.0, max_tokens=WARMUP_TOKENS, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [0, 1, 2, 3]}], warmup, use_tqdm=False)
    return Engine(spec, llm, time.perf_counter() - tic, watchdog)


@contextlib.contextmanager
def _keeping_distributed_state() -> Iterator[None]:
    """vLLM's engine-core shutdown without its teardown of this process's distributed state
    (``cleanup_dist_env_and_memory``), which engines still running here use."""
    from vllm.v1.engine import core

    cleanup = core.cleanup_dist_env_and_memory
    core.cleanup_dist_env_and_memory = gc.collect
    try:
        yield
    finally:
        core.cleanup_dist_env_and_memory = cleanup


@contextlib.contextmanager
def _interruptible_start(keep: set[int]) -> Iterator[None]:
    """Ctrl-C while ``vllm.LLM(...)`` starts its engine: pyzmq's start-up poll raises its
    own retry over the KeyboardInterrupt and the start goes on, so here a SIGINT kills the
    engine's processes (this process's descendants but the pids ``keep``), which ends the
    start-up with vLLM's error, raised as the KeyboardInterrupt it was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupted = False

    def stop_engine(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        for pid, _ in reaper.descendants():
            if pid not in keep:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # no engine tracebacks

    previous = signal.signal(signal.SIGINT, stop_engine)
    try:
        yield
    except BaseException:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:  # the engine came up before it could be stopped
        raise KeyboardInterrupt


class _Tee:
    """This process's stdout and stderr (fds 1 and 2, which an engine's processes inherit)
    passed through a pipe each while the engine starts: everything is forwarded unchanged, as
    long as any process writes to them, and the start-up's last lines are kept."""

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.lock = threading.Lock()
        self.keep = True  # whether lines are still kept (the start-up)
        self.saved: dict[int, int] = {}  # fd -> a copy of what it was (where its bytes go)
        self.thread: threading.Thread | None = None

    def __enter__(self) -> _Tee:
        sys.stdout.flush()
        sys.stderr.flush()
        reads = {}
        for fd in (1, 2):
            read, write = os.pipe()
            self.saved[fd] = os.dup(fd)
            reads[read] = self.saved[fd]
            os.dup2(write, fd)
            os.close(write)
        self.thread = threading.Thread(target=self._forward, args=(reads,), daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Give this process its own fds back; the engine's processes keep the pipes."""
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
        self.keep = exc[0] is not None  # a failed start's output is read by output()

    def _forward(self, reads: dict[int, int]) -> None:
        """Copy each pipe to its fd until no process writes to it, splitting lines for the tail."""
        partial = dict.fromkeys(reads, b"")
        with selectors.DefaultSelector() as selector:
            for read in reads:
                selector.register(read, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        with contextlib.suppress(OSError):  # a closed stdout: still drain
                            _write_all(reads[key.fd], data)
                    else:  # every writer is gone
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        os.close(reads[key.fd])
                    if self.keep:
                        *lines, partial[key.fd] = re.split(rb"[\r\n]", partial[key.fd] + data)
                        lines += [] if data else [partial[key.fd]]
                        with self.lock:
                            self.tail.extend(x.decode(errors="replace") for x in lines)

    def output(self) -> list[str]:
        """The last lines written while the engine started, once its processes are gone
        (waits up to :data:`DRAIN_S` for what they wrote to arrive)."""
        if self.thread is not None:
            self.thread.join(DRAIN_S)
        with self.lock:
            return list(self.tail)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


# a vLLM log line: "(EngineCore pid=42) ERROR 11-27 09:09:39 [core.py:1510] <message>"
_LOG_LINE = re.compile(r"^(?:\(\S+ pid=\d+\) )?([A-Z]+) \d\d-\d\d [\d:.]+ \[[^\]]*\] ?(.*)$")
# the end of a traceback ("ValueError: ...", "pkg.mod.SomeError: ...") or "prog: error: ..."
_ERROR_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)|\S.*\berror: )"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_cause(lines: Iterable[str]) -> str | None:
    """The root cause in a failed vLLM process's output: the last exception or ``error:``
    line (the end of a traceback, plain or logged) that does not point to another one
    (vLLM's "See root cause above"), else the last ERROR log line; never a warning. None
    when there is neither."""
    errors, logged = [], []
    for raw in lines:
        line = _ANSI.sub("", raw).rstrip()
        level, text = m.groups() if (m := _LOG_LINE.match(line)) else (None, line)
        if level in ("DEBUG", "INFO", "WARNING") or not text or "root cause" in text:
            continue
        if _ERROR_LINE.match(text):
            errors.append(text)
        elif level is not None and not text[0].isspace():
            logged.append(text)
    return (errors or logged or [None])[-1]


def _shutdown(engine: Engine) -> None:
    """Shut an engine down: its processes, its watchdog, then its memory. Engines in this
    process share vLLM's distributed state: while one of them stays live, a shutdown leaves
    that state to it (vLLM's ``EngineCore.shutdown`` tears it down), the last one's removes it."""
    shared = any(not e.spec.multiprocessing() for e in live.backends(OFFLINE))
    with _keeping_distributed_state() if shared else contextlib.nullcontext():
        engine.llm.llm_engine.engine_core.shutdown()
    reaper.stop(engine.watchdog)
    del engine
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


OFFLINE = live.Kind("offline", start=_start, stop=_shutdown)  # backends of vllm.LLM
