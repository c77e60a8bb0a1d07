"""The offline backend: ``vllm.LLM`` engines stepped in this process, closed loop.

:func:`generate` keeps ``concurrency`` requests in flight on one engine; :class:`Offline`
is a live engine as a :class:`harness.backends.base.Generator`, each finished
``vllm.RequestOutput`` turned into a :class:`harness.records.Completion`
(:func:`completion_of`); :data:`ENGINES` is ``backend=offline``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import metrics
from harness.backends import live
from harness.backends.arrivals import Load
from harness.backends.base import Backend, Generator
from harness.backends.engine import OFFLINE
from harness.errors import ConfigError
from harness.records import Completion


def generate(
    llm: Any,
    prompts: Sequence[Sequence[int]],
    params: Any,
    concurrency: int,
    on_output: Callable[[int, Any], None],
    on_step: Callable[[Any], None] | None = None,
) -> None:
    """Generate every prompt, keeping ``concurrency`` requests in flight.

    Calls ``on_step(RequestOutput)`` for every output of every engine step (``params``
    chooses cumulative or delta outputs), then ``on_output(index, RequestOutput)`` as each
    request finishes.
    """
    pending = iter(enumerate(prompts))
    in_flight: dict[str, int] = {}

    def submit() -> None:
        item = next(pending, None)
        if item is None:
            return
        prompt = {"prompt_token_ids": list(item[1])}
        if on_step is None:
            (request_id,) = llm.enqueue(prompt, params, use_tqdm=False)
        else:  # LLM.enqueue makes a request final-output-only; the engine streams each step
            request_id = llm.llm_engine.add_request(uuid.uuid4().hex, prompt, params)
        in_flight[request_id] = item[0]

    def finished(output_id: str) -> int:
        # enqueue() returns vLLM's internal id "<id>-<random suffix>"; outputs carry "<id>".
        key = next(k for k in in_flight if k == output_id or k.startswith(f"{output_id}-"))
        return in_flight.pop(key)

    for _ in range(concurrency):
        submit()
    while in_flight:
        for output in llm.llm_engine.step():
            if on_step is not None:
                on_step(output)
            if output.finished:
                on_output(finished(output.request_id), output)
                submit()


def latencies(output: Any) -> tuple[float, float, float]:
    """(TTFT, e2e, decode) seconds of one finished ``vllm.RequestOutput``: TTFT and e2e
    from its arrival, decode from its first output token to its last."""
    stats = output.metrics
    decode = stats.last_token_ts - stats.first_token_ts
    return stats.first_token_latency, stats.first_token_latency + decode, decode


def _tuple(values: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def completion_of(output: Any) -> Completion:
    """The :class:`Completion` of one finished ``vllm.RequestOutput``."""
    completion = output.outputs[0]
    ttft, e2e, decode = latencies(output)
    spec = completion.spec_decode_metrics
    return Completion(
        token_ids=tuple(completion.token_ids),
        text=completion.text,
        finish_reason=completion.finish_reason,
        ttft_s=ttft,
        e2e_s=e2e,
        decode_s=decode,
        histogram=_tuple(spec.histogram) if spec else None,
        num_draft_tokens=spec.num_draft_tokens if spec else None,
        per_step_accepted=_tuple(spec.per_step_accepted) if spec else None,
        per_step_drafted=_tuple(spec.per_step_drafted) if spec else None,
    )


@dataclass(frozen=True)
class Offline:
    """A live ``vllm.LLM`` stepped in this process (closed loop) and the seconds it took to
    start."""

    llm: Any
    start_s: float = 0.0

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: Any,
        load: Load,
        on_output: Callable[[int, Completion], None],
    ) -> None:
        """:func:`generate` at ``load.concurrency`` (open-loop rates need the server)."""
        generate(
            self.llm,
            prompts,
            params,
            load.concurrency,
            lambda index, output: on_output(index, completion_of(output)),
        )

    def spec_counts(self) -> metrics.SpecCounts | None:
        """vLLM's counters from ``LLM.get_metrics()``."""
        return metrics.counts_from_snapshot(self.llm.get_metrics())

    def pause(self) -> None:
        """Nothing: an offline pair alternates as docs/PAIRING.md measured it."""

    def resume(self) -> None:
        """Nothing (see :meth:`pause`)."""


class Engines(Backend):
    """``backend=offline``: ``vllm.LLM`` engines started here, kept in the live cache."""

    name = "offline"
    shares_counters = True  # vLLM keeps one set of counters per process

    def validate(self, cfg: Any) -> None:
        """Open-loop arrivals are refused: the engine runs closed-loop concurrency."""
        if cfg.request_rate is not None:
            raise ConfigError(
                f"request_rate={cfg.request_rate}: open-loop arrivals need backend=server "
                "(the offline engine runs closed-loop concurrency)"
            )

    def launch_lines(self, spec: Any, cfg: Any) -> list[str]:
        """The engine's ``vllm.LLM`` keyword arguments and where it runs."""
        lines = ["  vllm.LLM("]
        lines += [f"      {key}={value!r}," for key, value in spec.llm_kwargs().items()]
        ((name, value),) = spec.arrangement().items()
        where = "processes of its own" if value == "1" else "in this process"
        return [*lines, "  )", f"  env {name}={value} ({where})"]

    def instance(
        self, cfg: Any, specs: tuple[Any, ...], index: int, logs: Path
    ) -> list[tuple[Generator, bool]]:
        """Live engines of ``specs`` (:data:`harness.backends.engine.OFFLINE`)."""
        got = live.instance(OFFLINE, specs, index, cfg.instances > 1)
        return [(Offline(engine.llm, engine.start_s), reused) for engine, reused in got]

    def launches(self) -> int:
        return live.launches(OFFLINE)

    def beside(self, spec: Any, plain: Any) -> Any:
        """``plain`` in processes of its own when ``spec`` runs there only because its family
        needs them (prompt lookup under ``engine.multiprocessing=false``): both sides of the
        pair then hand each step off alike."""
        return plain.laid_out(True) if spec.apart_by_family() else plain

    def in_process(self, generator: Generator) -> Any | None:
        return generator.llm


ENGINES = Engines()
