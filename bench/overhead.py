"""Harness overhead against bare vLLM, and engine launches per sweep (prints figures).

    python bench/overhead.py                      # tiny random models, built on the fly
    python bench/overhead.py --target models/tiny/target_cot --draft models/tiny/draft_cot

1. The same prompts, one at a time, through a bare ``LLM.generate`` and the harness runner on
   one engine, alternated ``--rounds`` times; prints harness / bare tokens/s (target >= 0.97).
2. A multirun of cot and cot_sd on 3 datasets, ``spec.k=0,1,3,5``, in a subprocess; prints
   the engine launches it needed (must be 3 + 1 with the baseline, not one per job).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = ["variant=cot,cot_sd", "dataset=synth_easy,synth_medium,synth_hard", "spec.k=0,1,3,5"]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="target model dir (default: a tiny random one)")
    parser.add_argument("--draft", help="draft model dir (default: a tiny random one)")
    parser.add_argument("--k", type=int, default=3, help="draft tokens per step for part 1")
    parser.add_argument("--problems", type=int, default=32, help="prompts per round")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per output")
    parser.add_argument("--rounds", type=int, default=5, help="bare/harness alternations")
    parser.add_argument("--skip-sweep", action="store_true", help="only measure the overhead")
    return parser


def overrides(args: argparse.Namespace, results_dir: Path) -> list[str]:
    return [
        f"models.targets.cot={args.target}",
        f"models.drafts.cot={args.draft}",
        f"results_dir={results_dir}",
        f"limit={args.problems}",
        f"max_tokens={args.max_tokens}",
    ]


def bare_tokens_per_s(llm, prompts: list[list[int]], params) -> float:
    """Output tokens/s of plain ``LLM.generate`` calls, one prompt at a time."""
    tic = time.perf_counter()
    tokens = 0
    for ids in prompts:
        (out,) = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        tokens += len(out.outputs[0].token_ids)
    return tokens / (time.perf_counter() - tic)


def measure_overhead(args: argparse.Namespace, results_dir: Path) -> list[float]:
    """Harness/bare tokens-per-second ratios, one per round."""
    from harness.backends import engine as engines
    from harness.backends.offline import Offline
    from harness.config import compose_config
    from harness.metrics import tokens_per_s
    from harness.sweep.runner import prepare, run

    cfg = compose_config([*overrides(args, results_dir), "variant=cot_sd", f"spec.k={args.k}"])
    job = prepare(cfg)
    engine, _ = engines.get(job.spec)
    prompts = [list(r.prompt_token_ids) for r in job.requests]
    ratios = []
    for i in range(args.rounds):
        bare = bare_tokens_per_s(engine.llm, prompts, job.sampling_params())
        records, wall, _ = run(job, Offline(engine.llm), progress=True)
        harness = tokens_per_s(sum(r.output_tokens for r in records), wall)
        ratios.append(harness / bare)
        print(
            f"round {i + 1}: bare {bare:.1f} tok/s, harness {harness:.1f} tok/s, ratio {harness / bare:.3f}"
        )
    engines.clear()
    return ratios


def sweep_launches(args: argparse.Namespace, results_dir: Path) -> tuple[int, int, int]:
    """(engine launches, engine specs, jobs) of the 3-dataset x 3-K multirun."""
    from harness import results

    command = [sys.executable, "-m", "harness", "-m", *SWEEP, *overrides(args, results_dir)]
    command += ["limit=2", "max_tokens=16"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    summaries = [
        results.complete_summary(p.parent) for p in results_dir.glob(f"*/*/{results.SUMMARY}")
    ]
    specs = {(s["target"], s["draft"], s["k"]) for s in summaries}
    return max(s["engine_launches"] for s in summaries), len(specs), len(summaries)


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if not (args.target and args.draft):
            from train.tiny import build_random_pair

            args.target, args.draft = build_random_pair(Path(tmp) / "models")
        ratios = measure_overhead(args, Path(tmp) / "overhead")
        print(f"harness / bare tokens/s: median {statistics.median(ratios):.3f} (target >= 0.97)")
        if not args.skip_sweep:
            launches, specs, jobs = sweep_launches(args, Path(tmp) / "sweep")
            print(
                f"3-dataset x 3-K sweep: {jobs} jobs, {specs} engine specs, {launches} engine launches"
            )


if __name__ == "__main__":
    main(make_parser().parse_args())
