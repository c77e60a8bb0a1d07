"""The records a job produces: one RequestRecord per problem and one RunSummary, from
the Completion a backend returns for each request.

``to_row()`` is the only route to disk: a RequestRecord row is one line of the tidy
request table (``requests.parquet``), a RunSummary row is ``summary.json``. Spec fields
are None when the job ran without speculation (k = 0).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, get_type_hints

from harness.metrics import SpecCounts, counts_from_histogram


@dataclass(frozen=True)
class JobInfo:
    """What identifies a job in every row: (variant, dataset, k, concurrency, seed, temperature)."""

    sweep_id: str
    run_id: str
    experiment: str
    variant: str
    target: str
    draft: str | None
    k: int
    dataset: str
    difficulty: str
    prompt_style: str
    temperature: float
    seed: int
    concurrency: int
    repeat: int = 0  # which run of the job (seed = config seed + repeat)
    method: str | None = None  # the speculator family (harness.speculators.METHODS); None at k = 0
    draft_sample_method: str | None = None  # greedy | probabilistic (not for ngram)
    pairing: str = "sequential"  # interleaved: a baseline engine ran the same problems alongside
    backend: str = "offline"  # offline (vllm.LLM) | server (vLLM's OpenAI-compatible server)
    request_rate: float | None = None  # open-loop arrivals (requests/s); None = closed loop
    k_schedule: str | None = None  # K by batch size (harness.schedule.label); None = k always
    instances: int = 1  # fresh engine instances (pairs when interleaved) the problems split over
    # drafts accepted at random to this mean acceptance length (a what-if run: outputs are
    # not the target's, so accuracy and losslessness do not apply); None = real acceptance
    synthetic_acceptance_length: float | None = None

    def to_row(self) -> dict[str, Any]:
        """Flat dict of the job columns."""
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """One finished request as a backend returns it (times in seconds from its send)."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None
    ttft_s: float
    e2e_s: float
    # from the first output token to the last on the engine's own clock (a server's
    # per-request metrics; the client's clock only where a server reports none)
    decode_s: float
    sent_s: float | None = None  # when it was sent, from the first send of its batch
    itl_s: tuple[float, ...] | None = None  # gaps between streamed chunks (server backend)
    # vLLM's per-request speculative metrics (None without speculation): verify steps by
    # accepted drafts, drafted tokens, and per step (``detailed``) accepted and drafted
    histogram: tuple[int, ...] | None = None
    num_draft_tokens: int | None = None
    per_step_accepted: tuple[int, ...] | None = None
    per_step_drafted: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RequestRecord:
    """One problem sent through the engine: tokens, answer, latency, acceptance."""

    job: JobInfo
    problem_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None
    pred_answer: str
    gold_answer: str
    correct: bool
    extractor: str
    # lm-eval's strict-match and flexible-extract verdicts (harness.data.grading.CHAINS); None
    # when not graded both ways
    correct_strict: bool | None = field(default=None, kw_only=True)
    correct_flexible: bool | None = field(default=None, kw_only=True)
    ttft_s: float
    e2e_s: float
    tpot_s: float | None
    num_spec_steps: int | None
    num_draft_tokens: int | None
    num_accepted_tokens: int | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    acceptance_histogram: tuple[int, ...] | None
    output_hash: str
    output_token_ids: tuple[int, ...]
    rejection_tokens: tuple[str, ...] | None
    # accepted and drafted tokens of the verify steps starting in each third of the output
    # (early, middle, late); None at k = 0 or when steps without drafts hide the places
    accepted_thirds: tuple[int, ...] | None = field(default=None, kw_only=True)
    drafted_thirds: tuple[int, ...] | None = field(default=None, kw_only=True)
    # the server backend: when the request was sent (s from the job's first send) and the
    # gaps between its streamed chunks (a chunk carries every token of one verify step)
    sent_s: float | None = field(default=None, kw_only=True)
    itl_s: tuple[float, ...] | None = field(default=None, kw_only=True)
    # interleaved pairing: the same problem on the job's baseline engine, seconds away
    # (``harness.measure.pairing``); None when the job ran alone
    pair_sent_s: float | None = field(default=None, kw_only=True)  # server: its own window's
    pair_ttft_s: float | None = field(default=None, kw_only=True)
    pair_e2e_s: float | None = field(default=None, kw_only=True)
    pair_tpot_s: float | None = field(default=None, kw_only=True)
    pair_output_tokens: int | None = field(default=None, kw_only=True)
    pair_output_hash: str | None = field(default=None, kw_only=True)
    instance: int = field(default=0, kw_only=True)  # which of the job's instances answered it

    @property
    def spec_counts(self) -> SpecCounts | None:
        """This request's verify steps, drafted and accepted tokens (None at k = 0)."""
        if self.acceptance_histogram is None or self.num_draft_tokens is None:
            return None
        return counts_from_histogram(self.acceptance_histogram, self.num_draft_tokens)

    def to_row(self) -> dict[str, Any]:
        """One row of the tidy request table (lists for the sequence columns)."""
        row = self.job.to_row()
        for f in fields(self):
            if f.name == "job":
                continue
            value = getattr(self, f.name)
            row[f.name] = list(value) if isinstance(value, tuple) else value
        return row


def request_columns() -> dict[str, Any]:
    """The tidy request table's columns in order (JobInfo's fields, then RequestRecord's),
    each with its field's type."""
    hints = {**get_type_hints(JobInfo), **get_type_hints(RequestRecord)}
    names = [f.name for f in fields(JobInfo)]
    names += [f.name for f in fields(RequestRecord) if f.name != "job"]
    return {name: hints[name] for name in names}


@dataclass(frozen=True)
class RunSummary:
    """One finished job: config, provenance, timings, throughput and engine counters."""

    job: JobInfo
    config: dict[str, Any]
    config_hash: str
    versions: dict[str, str | None]
    hardware: dict[str, Any]
    engine_start_s: float
    engine_reused: bool
    engine_launches: int
    wall_s: float
    num_requests: int
    output_tokens: int
    output_tokens_per_s: float
    spec: SpecCounts | None
    counter_mismatch: str | None
    # the requests ``spec`` covers: fewer than ``num_requests`` when an instance's counters
    # were lost to an engine started after the job's own (``harness.sweep.job.combine``)
    spec_requests: int | None = field(default=None, kw_only=True)
    # what determines the numbers, by part (``harness.sweep.job.run_key``); a re-run compares it
    run_key: dict[str, str] = field(default_factory=dict, kw_only=True)
    # provenance (``harness.provenance``): model identity by config key, problems digest,
    # the checkout's commit and dirtiness, the command line
    models: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True)
    dataset_digest: str | None = field(default=None, kw_only=True)
    git: dict[str, Any] = field(default_factory=dict, kw_only=True)
    command: list[str] = field(default_factory=list, kw_only=True)
    # the drift sentinel: seconds per unit of the fixed reference requests on ``engine``
    # (target: the plain baseline engine; job: the job's own) at the job's start and end
    reference: dict[str, Any] | None = field(default=None, kw_only=True)
    # completed requests per second of ``wall_s`` (the report's goodput counts those
    # meeting an SLO, from the per-request times)
    request_throughput: float | None = field(default=None, kw_only=True)
    # seconds the job spent in each phase (``harness.sweep.job.PHASES``), its instances summed
    phases_s: dict[str, float] | None = field(default=None, kw_only=True)

    def to_row(self) -> dict[str, Any]:
        """The ``summary.json`` object; ``complete`` marks a fully written job."""
        row: dict[str, Any] = {"sweep_id": self.job.sweep_id, "run_id": self.job.run_id}
        row["complete"] = True
        row.update(self.job.to_row())
        for f in fields(self):
            if f.name != "job":
                row[f.name] = getattr(self, f.name)
        row["spec"] = self.spec.to_row() if self.spec else None
        return row

    def headline(self) -> str:
        """One line for the terminal."""
        text = (
            f"{self.job.run_id}: {self.num_requests} requests, "
            f"{self.output_tokens_per_s:.1f} tok/s, wall {self.wall_s:.1f}s"
        )
        if self.spec:
            spec = self.spec.to_row()
            text += (
                f", acceptance {spec['acceptance_rate'] or 0:.3f}, "
                f"mean acceptance length {spec['mean_acceptance_length'] or 0:.2f}"
            )
            if self.spec_requests is not None and self.spec_requests < self.num_requests:
                text += f" (vLLM counters of {self.spec_requests} of {self.num_requests} requests)"
        if self.counter_mismatch:
            text += f" [counter mismatch: {self.counter_mismatch}]"
        return text
