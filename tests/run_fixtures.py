"""Run directories with known numbers, written by the harness's own records and writer.

For tests and benchmarks of the report. Each run is drawn from the analytical model with
chosen truths (accuracy, mean output length, the draft's ``alpha`` and cost ratio
``cost``); outputs depend only on (target, prompt style, dataset, problem, seed), never on
K, so every TPOT speedup has the known expectation E(alpha, K) / (K cost + 1) and every
K > 0 run is lossless. Records go through :class:`harness.records.RequestRecord`,
``RunSummary`` and :func:`harness.results.write_job`, so they follow the harness's schema.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics, results
from harness.records import JobInfo, RequestRecord, RunSummary
from reports import theory

TARGET_TPOT_S = 0.02  # seconds per output token of plain decoding at concurrency 1
PREFILL_S = 0.05  # mean time to first token
NOISE = 0.1  # log-normal sigma of per-request timings
MAX_TOKENS = 512
# Text of rejected draft tokens, and how often each kind is rejected per prompt style.
REJECTION_POOL = {
    "digit": ["1", "12", "7", " 3", "0"],
    "operator": ["+", " =", "*", "/", "-"],
    "word": [" the", " so", " total", "apples", " each"],
    "whitespace": ["\n", " ", "\n\n"],
    "latex": ["\\frac", "{", "\\cdot", "$", "^"],
}
REJECTION_MIX = {
    "cot": [0.2, 0.15, 0.45, 0.15, 0.05],
    "cod": [0.4, 0.3, 0.1, 0.15, 0.05],
    "direct": [0.4, 0.1, 0.3, 0.1, 0.1],
}


@dataclass(frozen=True)
class Variant:
    """A variant (``target`` and ``draft`` are roles, as in the config) and the truths its
    runs are drawn from."""

    name: str
    target: str
    draft: str | None
    prompt_style: str
    accuracy: float
    mean_tokens: float
    alpha: float = 0.0  # per-token acceptance of the draft
    cost: float = 0.0  # draft / target cost per forward

    @property
    def target_model(self) -> str:
        """The target's model directory, as the harness records it."""
        return f"models/synthetic/target_{self.target}"

    @property
    def draft_model(self) -> str | None:
        """The draft's model directory (None without a draft)."""
        return self.draft and f"models/synthetic/draft_{self.draft}"


SEED_STUDY = (
    Variant("base", "base", None, "direct", 0.35, 40),
    Variant("cot", "cot", None, "cot", 0.70, 200),
    Variant("cod", "cod", None, "cod", 0.66, 80),
    Variant("cot_sd", "cot", "cot", "cot", 0.70, 200, alpha=0.75, cost=0.08),
    Variant("cod_sd", "cod", "cod", "cod", 0.66, 80, alpha=0.65, cost=0.08),
)
DATASETS = {"synth_easy": "easy", "synth_medium": "medium", "synth_hard": "hard"}


@dataclass(frozen=True)
class Job:
    """One synthetic job: a variant on a dataset at (K, concurrency, seed)."""

    sweep: str
    variant: Variant
    dataset: str
    difficulty: str
    k: int
    concurrency: int = 1
    seed: int = 0
    n_problems: int = 100
    detailed: bool = False  # record rejection_tokens
    pairing: str = "sequential"  # interleaved: each record carries its baseline pair
    speed: float = 1.0  # the machine's slowness during the run: every time is scaled by it
    within: float = 1.0  # the drift sentinel's end / start within the run
    request_rate: float | None = None  # open-loop arrivals on the server backend
    server: bool = False  # on the server backend closed loop (no request_rate)

    @property
    def name(self) -> str:
        """The job directory name."""
        v = self.variant.name
        if self.request_rate is not None:
            rate = f"-server-rps{self.request_rate:g}"
        else:
            rate = "-server" if self.server else ""
        return f"{v}-{self.dataset}-k{self.k}-c{self.concurrency}{rate}-s{self.seed}"

    @property
    def info(self) -> JobInfo:
        """The job's identity as the harness records it."""
        v = self.variant
        return JobInfo(
            sweep_id=self.sweep, run_id=self.name, experiment="synthetic", variant=v.name,
            target=v.target_model, draft=v.draft_model, k=self.k, dataset=self.dataset,
            difficulty=self.difficulty, prompt_style=v.prompt_style, temperature=0.0,
            seed=self.seed, concurrency=self.concurrency, pairing=self.pairing,
            backend="offline" if self.request_rate is None and not self.server else "server",
            request_rate=self.request_rate,
        )  # fmt: skip


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    """Multiplicative noise with mean 1."""
    return rng.lognormal(-(NOISE**2) / 2, NOISE, n)


def _histograms(job: Job, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts per verify step, from the truncated geometric law: (n, K + 1)."""
    a, k = job.variant.alpha, job.k
    pmf = np.append(a ** np.arange(k) * (1 - a), a**k)
    steps = np.maximum(1, np.round((tokens - 1) / theory.expected_tokens(a, k))).astype(int)
    return rng.multinomial(steps, pmf)


def _rejections(job: Job, n: int, rng: np.random.Generator) -> list[tuple[str, ...] | None]:
    if not (job.detailed and job.k > 0):
        return [None] * n
    counts = rng.poisson(5, n)
    kinds = rng.choice(len(REJECTION_POOL), counts.sum(), p=REJECTION_MIX[job.variant.prompt_style])
    pools = list(REJECTION_POOL.values())
    texts = [pools[i][rng.integers(len(pools[i]))] for i in kinds]
    ends = np.cumsum(counts)
    return [tuple(texts[end - c : end]) for c, end in zip(counts, ends, strict=True)]


def step_time(job: Job, draft_as_target: bool = False) -> float:
    """Seconds of one verify step (one token at K = 0) of the job's engine: K c + 1 target
    tokens, dearer with concurrency; the draft's own token costs c target tokens."""
    token = TARGET_TPOT_S * (1 + 0.2 * (job.concurrency - 1))
    if draft_as_target:
        return token * job.variant.cost
    return token * (job.k * (job.variant.cost + 0.1 * np.log2(job.concurrency)) + 1)


def write_calibration(
    results_dir: Path, jobs: list[Job], cost: Callable[[Job, bool], float] | None = None
) -> None:
    """The calibration files ``harness.sweep.calibrate`` would write for ``jobs``' engines,
    each unit's seconds ``cost(job, draft_as_target)`` (default :func:`step_time`)."""
    cost = cost or step_time
    from harness.calibration import record

    def save(job: Job, target: str, draft: str | None, seconds: float) -> None:
        m = {"concurrency": job.concurrency, "requests": 3, "decode_s": 100 * seconds,
             "units": 100, "per_unit_s": seconds}  # fmt: skip
        name = f"{target}-{draft}-{job.k}-{job.concurrency}.json".replace("/", "_")
        written = {"target": target, "draft": draft, "k": job.k, "identity": {},
                   "measurements": {str(job.concurrency): m}}  # fmt: skip
        record.save(Path(results_dir) / job.sweep / record.CALIBRATION / name, written)

    for job in jobs:
        v = job.variant
        save(job, v.target_model, v.draft_model if job.k else None, cost(job, False))
        if job.k:
            plain = dataclasses.replace(job, k=0)
            save(plain, v.target_model, None, cost(plain, False))
            save(plain, str(v.draft_model), None, cost(job, True))


def records(job: Job) -> list[RequestRecord]:
    """The request records of one synthetic job."""
    v, n = job.variant, job.n_problems
    # What the target writes: fixed by the problem, never by K (greedy decoding is lossless).
    out_rng = _rng(job.sweep, v.target, v.prompt_style, job.dataset, job.seed)
    correct = out_rng.random(n) < v.accuracy
    tokens = np.maximum(2, out_rng.poisson(v.mean_tokens, n))
    rng = _rng(job.sweep, job.name)
    step_cost = step_time(job) / (theory.expected_tokens(v.alpha, job.k) if job.k else 1.0)
    tpot = job.speed * step_cost * _lognormal(rng, n)
    ttft = job.speed * PREFILL_S * _lognormal(rng, n)
    plain = step_time(dataclasses.replace(job, k=0))  # the pair: the target without a draft
    pair_rng = _rng(job.sweep, job.name, "pair")
    pair_tpot = job.speed * plain * _lognormal(pair_rng, n)
    pair_ttft = job.speed * PREFILL_S * _lognormal(pair_rng, n)
    paired = job.pairing == "interleaved"
    hists = _histograms(job, tokens, rng) if job.k else [None] * n
    rejections = _rejections(job, n, rng)
    info = job.info
    out = []
    for i in range(n):
        ids = tuple(range(i + job.seed, i + job.seed + int(tokens[i])))
        hist = None if hists[i] is None else tuple(int(x) for x in hists[i])
        spec = None if hist is None else metrics.counts_from_histogram(hist, sum(hist) * job.k)
        out.append(
            RequestRecord(
                job=info,
                problem_id=f"{job.dataset}-{i:04d}",
                prompt_tokens=60,
                output_tokens=len(ids),
                finish_reason="stop",
                pred_answer=str(i) if correct[i] else "[invalid]",
                gold_answer=str(i),
                correct=bool(correct[i]),
                extractor="strict",
                ttft_s=float(ttft[i]),
                e2e_s=float(ttft[i] + tpot[i] * (len(ids) - 1)),
                tpot_s=float(tpot[i]),
                num_spec_steps=spec and spec.num_steps,
                num_draft_tokens=spec and spec.num_draft_tokens,
                num_accepted_tokens=spec and spec.num_accepted_tokens,
                acceptance_rate=spec
                and metrics.acceptance_rate(spec.num_accepted_tokens, spec.num_draft_tokens),
                mean_acceptance_length=spec
                and metrics.mean_acceptance_length(spec.num_accepted_tokens, spec.num_steps),
                acceptance_histogram=hist,
                output_hash=metrics.output_hash(ids),
                output_token_ids=ids,
                rejection_tokens=rejections[i],
                pair_ttft_s=float(pair_ttft[i]) if paired else None,
                pair_e2e_s=float(pair_ttft[i] + pair_tpot[i] * (len(ids) - 1)) if paired else None,
                pair_tpot_s=float(pair_tpot[i]) if paired else None,
                pair_output_tokens=len(ids) if paired else None,
                pair_output_hash=metrics.output_hash(ids) if paired else None,
            )
        )
    return out


def with_columns(recs: list[RequestRecord], **columns: list[Any]) -> list[RequestRecord]:
    """``recs`` with the named fields set by hand, one value per record."""
    return [
        dataclasses.replace(r, **{name: values[i] for name, values in columns.items()})
        for i, r in enumerate(recs)
    ]


def summary(job: Job, recs: list[RequestRecord]) -> RunSummary:
    """The run summary the harness would write next to ``recs``."""
    v, k = job.variant, job.k
    tokens = sum(r.output_tokens for r in recs)
    wall = sum(r.e2e_s for r in recs) / job.concurrency
    return RunSummary(
        job=job.info,
        config={
            "variant": {
                "name": v.name,
                "target": v.target,
                "draft": v.draft,
                "prompt_style": v.prompt_style,
            },
            "spec": {"k": k},
            "concurrency": job.concurrency,
            "seed": job.seed,
            "max_tokens": MAX_TOKENS,
        },
        config_hash=f"{zlib.crc32(job.name.encode()):08x}",
        versions={"vllm": "synthetic", "torch": None, "transformers": None, "draftbench": None},
        hardware={"device": "cpu", "cpu": "synthetic", "cpu_count": 2, "gpu": None, "gpu_count": 0},
        engine_start_s=0.0,
        engine_reused=True,
        engine_launches=1,
        wall_s=wall,
        num_requests=len(recs),
        output_tokens=tokens,
        output_tokens_per_s=metrics.tokens_per_s(tokens, wall),
        spec=metrics.total_counts(r.spec_counts for r in recs) if k else None,
        counter_mismatch=None,
        reference={
            "engine": "baseline" if job.pairing == "interleaved" else "job",
            "k": 0 if job.pairing == "interleaved" else job.k,
            "start_s": job.speed * TARGET_TPOT_S,
            "end_s": job.speed * job.within * TARGET_TPOT_S,
        },
    )


def write_job(results_dir: Path, job: Job, recs: list[RequestRecord] | None = None) -> Path:
    """Write ``results_dir/<sweep>/<job>/`` through the harness's writer; return the dir.

    ``recs`` replaces the drawn records (e.g. ones with hand-set values).
    """
    out = Path(results_dir) / job.sweep / job.name
    recs = records(job) if recs is None else recs
    results.write_job(out, recs, summary(job, recs))
    return out


def as_before_digests(job_dir: Path) -> None:
    """Drop the table's sha256 from the summary, as the harness wrote it before digests (a
    test may then rewrite the table, e.g. without a column added later)."""
    path = Path(job_dir) / results.SUMMARY
    summary = json.loads(path.read_text())
    del summary[results.REQUESTS_SHA256]
    path.write_text(json.dumps(summary))


def zero_middle(path: Path, margin: int = 200) -> None:
    """Overwrite a parquet file's data pages with zeros from byte ``margin`` to ``margin``
    bytes before their end, leaving the footer (schema, row counts) intact."""
    data = bytearray(Path(path).read_bytes())
    end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")  # where the footer starts
    assert end - margin > margin, "too small to corrupt in the middle"
    data[margin : end - margin] = bytes(end - 2 * margin)
    Path(path).write_bytes(bytes(data))


def seed_study_jobs(
    sweep: str,
    ks: tuple[int, ...] = (0, 1, 2, 3, 5),
    concurrencies: tuple[int, ...] = (1,),
    seeds: tuple[int, ...] = (0,),
    n_problems: int = 100,
    detailed: bool = True,
    variants: tuple[Variant, ...] = SEED_STUDY,
) -> list[Job]:
    """The seed study's grid: plain variants at K = 0, draft variants at every K > 0."""
    return [
        Job(sweep, v, dataset, difficulty, k, conc, seed, n_problems, detailed)
        for v in variants
        for dataset, difficulty in DATASETS.items()
        for k in ([k for k in ks if k > 0] if v.draft else [0])
        for conc in concurrencies
        for seed in seeds
    ]
