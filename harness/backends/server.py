"""The server backend: vLLM's OpenAI-compatible server, started per engine spec or reached
by URL (:func:`connect`), and the streaming client that sends a job's requests to it.

A started server is ``python -m vllm.entrypoints.openai.api_server`` with a spec's engine
arguments on a free loopback port, in its own session (Ctrl-C reaches only the harness,
which stops it) under a ``harness.backends.reaper`` watchdog; live ones are backends of kind
:data:`SERVER` in the one cache, :mod:`harness.backends.live`. :meth:`Server.generate` streams
completions at the job's :class:`harness.backends.arrivals.Load`, recording each request's send
time, chunk gaps and speculative metrics. ``backend=server`` is :data:`STARTED`, or
:data:`AT_URL` with ``server.url``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics
from harness.backends import arrivals, live, reaper
from harness.backends.base import Backend, Generator
from harness.backends.engine import ENV, MULTIPROCESSING, EngineSpec, environment, failure_cause
from harness.errors import BackendError, ConfigError
from harness.files import key_digest
from harness.records import Completion

HOST = "127.0.0.1"
POLL_S = 0.5
STOP_S = 30.0  # a server's grace to shut down after SIGTERM
EXIT_GRACE_S = 2.0  # how long a failed request waits to see whether its server exited
PAUSE_S = 2.0  # how long a pause waits for its SIGSTOPs to land
LOG_LINES = 200  # the lines of a server's log searched for the cause of its exit


class ServerError(BackendError):
    """A server that would not start, died, or answered a request with an error."""


def server_args(spec: EngineSpec) -> list[str]:
    """The server's command-line arguments for ``spec``: its ``vllm.LLM`` keyword
    arguments as flags (``--max-model-len 1024``, ``--enforce-eager``,
    ``--speculative-config '{...}'``)."""
    kwargs = spec.llm_kwargs()
    del kwargs["disable_log_stats"]  # off by default in the server, and a flag without --no-
    # each answer's engine-side timings (its decode interval: Completion.decode_s)
    args = ["--enable-per-request-metrics"]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        elif value is not None:
            args += [flag, str(value)]
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _cause(log: Path, offset: int, returncode: int) -> str:
    """Why a server exited with ``returncode``, from its log from byte ``offset`` on (where
    this server's own lines start; a restarted server appends to the log): the root cause
    its log names (:func:`harness.backends.engine.failure_cause`), else, when it exited by
    itself, its last line; a signal that killed it is named first."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    lines = [ln.strip() for ln in text.splitlines()[-LOG_LINES:] if ln.strip()]
    cause = failure_cause(lines)
    if returncode >= 0:
        return cause or (lines or ["empty log"])[-1]
    name = {s.value: s.name for s in signal.Signals}.get(-returncode, "unnamed")
    killed = f"killed by signal {-returncode} ({name})"
    return f"{killed}; its last error line: {cause}" if cause else killed


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _new_loop() -> asyncio.AbstractEventLoop:
    """An event loop built with SIGINT deferred until it is whole: a Ctrl-C half-way
    through the build leaves a half-made loop whose finaliser prints a traceback."""
    if threading.current_thread() is not threading.main_thread():  # no signal lands here
        return asyncio.new_event_loop()
    caught: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda *received: caught.append(received))
    try:
        loop = asyncio.new_event_loop()
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        loop.close()
        previous(*caught[0])
    return loop


def _run(coroutine: Any) -> Any:
    """``asyncio.run`` on a loop from :func:`_new_loop`."""
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(coroutine)


@dataclass
class Server:
    """A live server: the spec it runs (None when reached by URL), its base URL and the
    model name it serves; for a started server its process, watchdog and log."""

    spec: EngineSpec | None
    url: str
    model: str
    start_s: float = 0.0
    process: subprocess.Popen | None = None
    watchdog: subprocess.Popen | None = None
    log: Path | None = None
    log_start: int = 0  # the log's size when this server started
    _paused: list[Any] = field(default_factory=list, repr=False)  # psutil processes stopped

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: Any,
        load: arrivals.Load,
        on_output: Callable[[int, Completion], None],
    ) -> None:
        """Stream every prompt at ``load``, calling ``on_output(index, completion)`` as
        each request finishes (``sent_s`` from the first possible send).

        Raises:
            ServerError: a request failed, or the server died (with its log's cause).
        """
        import aiohttp

        try:
            _run(self._generate(prompts, params, load, on_output))
        except* (ServerError, OSError, aiohttp.ClientError) as group:
            raise self._failure(group.exceptions[0]) from None

    def _failure(self, exc: BaseException) -> ServerError:
        if self.process is not None:
            # a killed server's dropped stream can arrive before its exit is seen
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=EXIT_GRACE_S)
        if self.process is not None and self.process.poll() is not None:
            code = self.process.returncode
            return ServerError(
                f"the vLLM server died (exit code {code}): "
                f"{_cause(self.log, self.log_start, code)} (log: {self.log})"
            )
        return exc if isinstance(exc, ServerError) else ServerError(f"{self.url}: {exc}")

    async def _generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: Any,
        load: arrivals.Load,
        on_output: Callable[[int, Completion], None],
    ) -> None:
        import aiohttp

        times = arrivals.send_times(len(prompts), load)
        slots = asyncio.Semaphore(load.concurrency)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            start = time.perf_counter()

            async def send(index: int) -> None:
                await asyncio.sleep(max(0.0, start + times[index] - time.perf_counter()))
                async with slots:
                    sent = time.perf_counter() - start
                    completion = await self._stream(session, prompts[index], params)
                on_output(index, replace(completion, sent_s=sent))

            async with asyncio.TaskGroup() as group:
                for index in range(len(prompts)):
                    group.create_task(send(index))

    async def _stream(self, session: Any, prompt: Sequence[int], params: Any) -> Completion:
        """One streamed completion; times from its send."""
        from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler

        payload = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "seed": params.seed,
            "ignore_eos": params.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        }
        ids: list[int] = []
        texts: list[str] = []
        stamps: list[float] = []
        finish, spec, decode_ms = None, None, None
        tic = time.perf_counter()
        async with session.post(f"{self.url}/v1/completions", json=payload) as response:
            if response.status != 200:
                body = _served(await response.read(), response.content_type)
                raise ServerError(
                    f"{self.url}/v1/completions answered HTTP {response.status} "
                    f"{response.reason}: {body}"
                )
            handler = StreamedResponseHandler()
            async for chunk in response.content.iter_any():
                now = time.perf_counter()
                for message in handler.add_chunk(chunk):
                    data = message.removeprefix("data: ")
                    if message.startswith(":") or data == "[DONE]":
                        continue
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError:
                        raise ServerError(
                            f"{self.url} streamed a bad event: {data[:200]!r}"
                        ) from None
                    if "error" in event:
                        raise ServerError(f"{self.url}: {event['error'].get('message', event)}")
                    for choice in event.get("choices") or []:
                        tokens = choice.get("token_ids") or []
                        if tokens:
                            stamps.append(now)
                        ids += tokens
                        texts.append(choice.get("text") or "")
                        finish = choice.get("finish_reason") or finish
                    served = event.get("metrics") or {}
                    spec = served.get("speculative_decoding") or spec
                    decode_ms = served.get("generation_time_ms", decode_ms)
        if not stamps:
            raise ServerError(f"{self.url} streamed no tokens for a request")
        return Completion(
            token_ids=tuple(ids),
            text="".join(texts),
            finish_reason=finish,
            ttft_s=stamps[0] - tic,
            e2e_s=stamps[-1] - tic,
            decode_s=stamps[-1] - stamps[0] if decode_ms is None else decode_ms / 1000,
            itl_s=tuple(float(d) for d in np.diff(stamps)),
            histogram=tuple(spec["acceptance_histogram"]) if spec else None,
            num_draft_tokens=spec["num_draft_tokens"] if spec else None,
            per_step_accepted=_tuple(spec, "per_step_accepted"),
            per_step_drafted=_tuple(spec, "per_step_drafted"),
        )

    def spec_counts(self) -> metrics.SpecCounts | None:
        """The server's speculative-decoding counters (its Prometheus ``/metrics``, read by
        ``vllm bench serve``'s reader); None when it reports none."""
        return _run(self._spec_counts())

    def pause(self) -> None:
        """SIGSTOP a started server's processes (its worker would spin a core for a second
        after its last request: docs/results/server-idle-cpu); a server at a URL runs on."""
        if self.process is None or self._paused:
            return
        session = reaper.alive(reaper.session(self.process.pid))
        self._paused = [p for p in session if _signal(p, "suspend")]
        deadline = time.monotonic() + PAUSE_S  # SIGSTOP lands when the kernel next runs it
        while time.monotonic() < deadline and not all(map(_stopped, self._paused)):
            time.sleep(0.005)

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        for process in self._paused:
            _signal(process, "resume")
        self._paused = []

    async def _spec_counts(self) -> metrics.SpecCounts | None:
        import aiohttp
        from vllm.benchmarks.serve import fetch_spec_decode_metrics

        async with aiohttp.ClientSession() as session:
            found = await fetch_spec_decode_metrics(self.url, session)
        if found is None:
            return None
        positions = range(max(found.accepted_per_pos, default=-1) + 1)
        return metrics.SpecCounts(
            num_steps=found.num_drafts,
            num_draft_tokens=found.num_draft_tokens,
            num_accepted_tokens=found.num_accepted_tokens,
            accepted_per_pos=tuple(found.accepted_per_pos.get(i, 0) for i in positions),
        )


def _tuple(spec: dict[str, Any] | None, key: str) -> tuple[int, ...] | None:
    values = (spec or {}).get(key)
    return None if values is None else tuple(values)


def connect(url: str) -> Server:
    """A server someone else runs, serving the first model of its ``/v1/models``.

    Raises:
        ServerError: nothing answers at ``url``, or what answers serves no vLLM model list
            (what it served instead is named).
    """
    base = url.rstrip("/")
    models = f"{base}/v1/models"
    try:
        with urllib.request.urlopen(models, timeout=10) as response:
            body, kind = response.read(MAX_BODY), response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        raise ServerError(
            f"server.url={url}: {models} answered HTTP {exc.code} {exc.reason}, "
            "not a vLLM model list"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise ServerError(f"server.url={url}: no server answers there ({why})") from None
    try:
        model = json.loads(body)["data"][0]["id"]
        if not isinstance(model, str):
            raise TypeError
    except (ValueError, LookupError, TypeError):
        raise ServerError(
            f"server.url={url}: {models} served {_served(body, kind)} instead of a vLLM "
            'model list ({"data": [{"id": ...}]})'
        ) from None
    return Server(spec=None, url=base, model=model)


MAX_BODY = 1 << 20  # the bytes of an answer read to tell what it is
SHOWN = 120  # the characters of an answer quoted in an error


def _served(body: bytes, content_type: str) -> str:
    """What an answer held, on one line: the message of a JSON error, the JSON, or the
    content type and the start of its text (tags and whitespace collapsed)."""
    text = body.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        words = " ".join(re.sub(r"<[^>]*>", " ", text).split())
        return (
            f"a {content_type} page ({words[:SHOWN]!r})"
            if words
            else f"an empty {content_type} body"
        )
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return " ".join(error["message"].split())[:SHOWN]
    shown = json.dumps(data)
    return shown if len(shown) <= SHOWN else f"{shown[: SHOWN - 3]}..."


def _launch(spec: EngineSpec, same: int, log_dir: Path, timeout_s: float) -> Server:
    """:func:`start` as the live cache starts a server: its log is
    ``log_dir/server-<spec digest>[-<same>].log`` (appended to: a server started again after
    one died keeps the dead one's lines), and it stops when the harness exits."""
    name = f"server-{key_digest(spec)[:12]}{f'-{same}' if same else ''}.log"
    server = start(spec, log_dir / name, timeout_s)
    if live.launches(SERVER) == 0:
        atexit.register(live.clear, SERVER)  # a sweep's last server stops with the harness
    return server


def start(spec: EngineSpec, log: Path, timeout_s: float) -> Server:
    """Start a server for ``spec`` on a free loopback port and wait until it is healthy.

    Raises:
        ServerError: it exited while starting (the cause from its log) or stayed
            unhealthy for ``timeout_s``.
    """
    port = _free_port()
    url = f"http://{HOST}:{port}"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *server_args(spec)]
    command += ["--host", HOST, "--port", str(port)]
    log.parent.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    before = reaper.descendants()
    watchdog = reaper.watch(reaper.tag(), before)
    # with the tag; never an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0), whose server
    # sends each answer as one chunk: no inter-token latencies to measure
    dropped = {*ENV.values(), MULTIPROCESSING}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env |= {k: v for k, v in environment(spec).items() if v is not None}
    with log.open("a") as out:
        log_start = out.tell()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches the harness, not the server
        )
    server = Server(spec, url, spec.target, 0.0, process, watchdog, log, log_start)
    try:
        while not _healthy(url):
            if process.poll() is not None:
                code = process.returncode
                raise ServerError(
                    f"the vLLM server exited with code {code} while starting: "
                    f"{_cause(log, log_start, code)} (log: {log})"
                )
            if time.perf_counter() - tic > timeout_s:
                raise ServerError(
                    f"the vLLM server was not healthy after {timeout_s:g} s "
                    f"(server.start_timeout_s); its log: {log}"
                )
            time.sleep(POLL_S)
    except BaseException:
        stop(server)
        raise
    server.start_s = time.perf_counter() - tic
    return server


def _stopped(process: Any) -> bool:
    """Whether a process is stopped (or gone)."""
    import psutil

    try:
        return process.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return True


def _signal(process: Any, action: str) -> bool:
    """``process.suspend()`` or ``.resume()``; False when it is gone."""
    import psutil

    try:
        getattr(process, action)()
    except psutil.NoSuchProcess:
        return False
    return True


def stop(server: Server) -> None:
    """Stop a started server and everything in its session (its engine's processes, also
    after the server died); a server reached by URL stays."""
    if server.process is None:
        return
    server.resume()  # a stopped process would hold its SIGTERM until continued
    children = reaper.session(server.process.pid)
    server.process.terminate()
    try:
        server.process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    reaper.reap(children)
    if server.watchdog is not None:
        reaper.stop(server.watchdog)


def _running(server: Server) -> bool:
    return server.process is None or server.process.poll() is None


# started servers; ``live.get_all(SERVER, specs, log_dir=..., timeout_s=...)``
SERVER = live.Kind("server", start=_launch, stop=stop, running=_running)


class _Servers(Backend):
    """``backend=server``: jobs stream from vLLM servers; their runs are named ``-server``."""

    name = "server"
    run_name = "-server"

    def launches(self) -> int:
        return live.launches(SERVER)

    def timed(self, spec: Any) -> Any:
        """``spec`` in processes of its own: a server's engine core never steps in the
        process that serves its API."""
        return spec.laid_out(multiprocessing=True)


class Started(_Servers):
    """Servers started here per engine spec (their logs in ``logs``), kept in the live cache."""

    def launch_lines(self, spec: Any, cfg: Any) -> list[str]:
        """The server's command line."""
        args = " ".join(shlex.quote(a) for a in server_args(spec))
        return [
            f"  python -m vllm.entrypoints.openai.api_server {args} --host {HOST} --port <free>"
        ]

    def instance(
        self, cfg: Any, specs: tuple[Any, ...], index: int, logs: Path
    ) -> list[tuple[Generator, bool]]:
        """Live servers of ``specs`` (:data:`SERVER`)."""
        fresh, timeout_s = cfg.instances > 1, cfg.server.start_timeout_s
        return live.instance(SERVER, specs, index, fresh, log_dir=logs, timeout_s=timeout_s)


class AtUrl(_Servers):
    """The server someone runs at ``server.url``: one instance, nothing beside it."""

    def validate(self, cfg: Any) -> None:
        """One engine instance: the harness starts none."""
        if cfg.instances != 1:
            raise ConfigError(
                f"instances={cfg.instances}: needs engines the harness starts; "
                "a server at server.url is one instance"
            )

    def alone(self, cfg: Any) -> str | None:
        return "a server reached at server.url has no baseline beside it"

    def launch_lines(self, spec: Any, cfg: Any) -> list[str]:
        return [f"  the running server at {cfg.server.url} (its own engine arguments)"]

    def instance(
        self, cfg: Any, specs: tuple[Any, ...], index: int, logs: Path
    ) -> list[tuple[Generator, bool]]:
        """The server at ``server.url`` (:func:`connect`), every live backend stopped."""
        live.clear()
        return [(connect(cfg.server.url), True)]


STARTED, AT_URL = Started(), AtUrl()
