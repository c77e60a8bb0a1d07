"""Synthetic run directories with known parameters, in the harness's results format.

For tests and benchmarks of the report, and for trying the report without an engine.
Each run is drawn from the analytical model with chosen truths: a variant's accuracy,
its mean output length, its draft's per-token acceptance ``alpha`` and cost ratio
``cost``. Correctness and output length depend only on (target, prompt style, dataset,
problem, seed), never on K, as greedy speculative decoding guarantees, so every TPOT
speedup has the known expectation E(alpha, K) / (K cost + 1).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reports import theory

TARGET_TPOT_S = 0.02  # seconds per output token of plain decoding at concurrency 1
PREFILL_S = 0.05  # mean time to first token
NOISE = 0.1  # log-normal sigma of per-request timings
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
    token_ids: bool = True  # store output_token_ids (the biggest column)

    @property
    def name(self) -> str:
        """The job directory name."""
        v = self.variant.name
        return f"{v}-{self.dataset}-k{self.k}-c{self.concurrency}-s{self.seed}"


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    """Multiplicative noise with mean 1."""
    return rng.lognormal(-(NOISE**2) / 2, NOISE, n)


def _list_array(lengths: np.ndarray, values: pa.Array, valid: np.ndarray) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(np.where(valid, lengths, 0))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~valid))


def _spec_columns(job: Job, tokens: np.ndarray, rng: np.random.Generator) -> dict[str, pa.Array]:
    """Histograms of accepted drafts per verify step, from the truncated geometric law."""
    n, k, a = len(tokens), job.k, job.variant.alpha
    if k == 0:
        nulls = pa.nulls(n, pa.int64())
        return {
            "num_spec_steps": nulls,
            "num_draft_tokens": nulls,
            "num_accepted_tokens": nulls,
            "acceptance_rate": pa.nulls(n, pa.float64()),
            "mean_acceptance_length": pa.nulls(n, pa.float64()),
            "acceptance_histogram": pa.nulls(n, pa.list_(pa.int64())),
        }
    pmf = np.append(a ** np.arange(k) * (1 - a), a**k)
    steps = np.maximum(1, np.round((tokens - 1) / theory.expected_tokens(a, k))).astype(int)
    hist = rng.multinomial(steps, pmf)
    accepted = hist @ np.arange(k + 1)
    values = pa.array(hist.ravel(), pa.int64())
    return {
        "num_spec_steps": pa.array(steps, pa.int64()),
        "num_draft_tokens": pa.array(steps * k, pa.int64()),
        "num_accepted_tokens": pa.array(accepted, pa.int64()),
        "acceptance_rate": pa.array(accepted / (steps * k)),
        "mean_acceptance_length": pa.array(1 + accepted / steps),
        "acceptance_histogram": _list_array(np.full(n, k + 1), values, np.ones(n, bool)),
    }


def _rejections(job: Job, n: int, rng: np.random.Generator) -> pa.Array:
    if not (job.detailed and job.k > 0):
        return pa.nulls(n, pa.list_(pa.string()))
    counts = rng.poisson(5, n)
    kinds = rng.choice(len(REJECTION_POOL), counts.sum(), p=REJECTION_MIX[job.variant.prompt_style])
    pools = list(REJECTION_POOL.values())
    texts = [pools[i][rng.integers(len(pools[i]))] for i in kinds]
    return _list_array(counts, pa.array(texts, pa.string()), np.ones(n, bool))


def requests_table(job: Job) -> pa.Table:
    """The tidy request table of one synthetic job."""
    v, n = job.variant, job.n_problems
    ids = np.array([f"{job.dataset}-{i:04d}" for i in range(n)])
    # What the target writes: fixed by the problem, never by K (greedy decoding is lossless).
    out_rng = _rng(job.sweep, v.target, v.prompt_style, job.dataset, job.seed)
    correct = out_rng.random(n) < v.accuracy
    tokens = np.maximum(2, out_rng.poisson(v.mean_tokens, n))
    rng = _rng(job.sweep, job.name)
    step_cost = (job.k * (v.cost + 0.1 * np.log2(job.concurrency)) + 1) / (
        theory.expected_tokens(v.alpha, job.k) if job.k else 1.0
    )
    tpot = TARGET_TPOT_S * (1 + 0.2 * (job.concurrency - 1)) * step_cost * _lognormal(rng, n)
    ttft = PREFILL_S * _lognormal(rng, n)
    gold = np.array([str(i) for i in range(n)])
    columns = {
        "sweep_id": pa.array([job.sweep] * n),
        "run_id": pa.array([job.name] * n),
        "experiment": pa.array(["synthetic"] * n),
        "variant": pa.array([v.name] * n),
        "target": pa.array([v.target_model] * n),
        "draft": pa.array([v.draft_model] * n, pa.string()),
        "k": pa.array(np.full(n, job.k)),
        "dataset": pa.array([job.dataset] * n),
        "difficulty": pa.array([job.difficulty] * n),
        "prompt_style": pa.array([v.prompt_style] * n),
        "temperature": pa.array(np.zeros(n)),
        "seed": pa.array(np.full(n, job.seed)),
        "concurrency": pa.array(np.full(n, job.concurrency)),
        "problem_id": pa.array(ids),
        "prompt_tokens": pa.array(np.full(n, 60)),
        "output_tokens": pa.array(tokens),
        "finish_reason": pa.array(["stop"] * n),
        "pred_answer": pa.array(np.where(correct, gold, "[invalid]")),
        "gold_answer": pa.array(gold),
        "correct": pa.array(correct),
        "extractor": pa.array(["strict"] * n),
        "ttft_s": pa.array(ttft),
        "e2e_s": pa.array(ttft + tpot * (tokens - 1)),
        "tpot_s": pa.array(tpot),
        **_spec_columns(job, tokens, rng),
        "output_hash": pa.array([f"{job.seed}-{i}-{t}" for i, t in zip(ids, tokens, strict=True)]),
        "rejection_tokens": _rejections(job, n, rng),
    }
    if job.token_ids:
        values = pa.array(np.arange(tokens.sum()) % 32000, pa.int64())
        columns["output_token_ids"] = _list_array(tokens, values, np.ones(n, bool))
    return pa.table(columns)


def summary(job: Job, table: pa.Table) -> dict:
    """The run summary the harness would write next to ``table``."""
    v, k = job.variant, job.k
    e2e = table["e2e_s"].to_numpy()
    tokens = int(table["output_tokens"].to_numpy().sum())
    wall = float(e2e.sum()) / job.concurrency
    spec = None
    if k:
        flat = table["acceptance_histogram"].combine_chunks().flatten().to_numpy()
        hist = flat.reshape(-1, k + 1).sum(axis=0)
        drafts = int(hist.sum())
        per_pos = [int(hist[i:].sum()) for i in range(1, k + 1)]
        accepted = sum(per_pos)
        spec = {
            "num_drafts": drafts,
            "num_draft_tokens": drafts * k,
            "num_accepted_tokens": accepted,
            "accepted_per_pos": per_pos,
            "acceptance_rate": accepted / (drafts * k),
            "mean_acceptance_length": 1 + accepted / drafts,
        }
    return {
        "sweep_id": job.sweep,
        "run_id": job.name,
        "complete": True,
        "experiment": "synthetic",
        "variant": v.name,
        "target": v.target_model,
        "draft": v.draft_model,
        "k": k,
        "dataset": job.dataset,
        "difficulty": job.difficulty,
        "prompt_style": v.prompt_style,
        "concurrency": job.concurrency,
        "seed": job.seed,
        "temperature": 0.0,
        "config": {
            "variant": {
                "name": v.name,
                "target": v.target,
                "draft": v.draft,
                "prompt_style": v.prompt_style,
            },
            "spec": {"k": k},
            "concurrency": job.concurrency,
            "seed": job.seed,
        },
        "config_hash": f"{zlib.crc32(job.name.encode()):08x}",
        "versions": {"vllm": "synthetic", "torch": None, "transformers": None, "draftbench": None},
        "hardware": {
            "device": "cpu",
            "cpu": "synthetic",
            "cpu_count": 2,
            "gpu": None,
            "gpu_count": 0,
        },
        "engine_start_s": 0.0,
        "engine_reused": True,
        "engine_launches": 1,
        "wall_s": wall,
        "num_requests": table.num_rows,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall,
        "spec": spec,
        "counter_mismatch": None,
        "lossless_fraction": 1.0 if k else None,
    }


def write_job(results_dir: Path, job: Job, table: pa.Table | None = None) -> Path:
    """Write ``results_dir/<sweep>/<job>/{requests.parquet,summary.json}``; return the dir.

    ``table`` replaces the drawn request table (e.g. one with hand-set values).
    """
    out = Path(results_dir) / job.sweep / job.name
    out.mkdir(parents=True, exist_ok=True)
    table = requests_table(job) if table is None else table
    pq.write_table(table, out / "requests.parquet")
    (out / "summary.json").write_text(json.dumps(summary(job, table), indent=1))
    return out


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
    jobs = []
    for v in variants:
        for dataset, difficulty in DATASETS.items():
            for k in ks if v.draft else (0,):
                if v.draft and k == 0:
                    continue
                for conc in concurrencies:
                    for seed in seeds:
                        jobs.append(Job(sweep, v, dataset, difficulty, k, conc, seed, n_problems))
    return [replace(j, detailed=detailed) for j in jobs]
