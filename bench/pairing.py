"""What interleaving two engines costs: the A/A ratio and the cost of a switch (prints figures).

    python bench/pairing.py                                  # a tiny random target
    python bench/pairing.py experiment=tiny variant=cot limit=40
    python bench/pairing.py experiment=smollm2 variant=base dataset=gsm8k \\
        datasets_dir=path/to/datasets limit=24 max_tokens=128

Runs the job's problems on two instances of its plain engine (B first unless ``--a-first``)
under each alternation of :data:`ORDERS`, ``--rounds`` times (defined in docs/PAIRING.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

ORDERS = (("AB", False), ("ABBA", False), ("ABBA", True))  # (pattern, settle)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="job overrides (default: a random target)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over every alternation")
    parser.add_argument(
        "--a-first",
        action="store_true",
        help="start instance A before B (default: B first, as a job's baseline starts first)",
    )
    return parser


def after_switch(pattern: str, n: int) -> dict[str, list[bool]]:
    """Per side, per problem: did its request run right after the other side's?"""
    from harness.measure import pairing

    flags: dict[str, list[bool]] = {pairing.JOB: [False] * n, pairing.BASELINE: [False] * n}
    last = None
    for side, ids in pairing.turns(n, 1, pattern):
        flags[side][ids[0]] = last is not None and side != last
        last = side
    return flags


def measure(job, llms: dict, pattern: str, settle: bool) -> tuple[float, float]:
    """(A/A ratio, switch cost) of one pass."""
    from harness.measure import pairing
    from harness.sweep.runner import interleave

    tpot: dict[str, dict[int, float]] = {side: {} for side in llms}

    def sink(side: str):
        def on_output(index: int, completion) -> None:
            tokens = len(completion.token_ids)
            if tokens > 1:
                tpot[side][index] = (completion.e2e_s - completion.ttft_s) / (tokens - 1)

        return on_output

    interleave(job, llms, {side: sink(side) for side in llms}, pattern, settle)
    a, b = tpot[pairing.JOB], tpot[pairing.BASELINE]
    both = sorted(set(a) & set(b))
    ratio = sum(b[i] for i in both) / sum(a[i] for i in both)
    flags = after_switch(pattern, len(job.requests))
    logs = []
    for i in both:
        switched = [s for s in (pairing.JOB, pairing.BASELINE) if flags[s][i]]
        if len(switched) == 1:  # one side after a switch, the other after its own engine
            other = pairing.BASELINE if switched[0] == pairing.JOB else pairing.JOB
            logs.append(math.log(tpot[switched[0]][i] / tpot[other][i]))
    return ratio, math.exp(statistics.fmean(logs)) if logs else float("nan")


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    from harness import console
    from harness.backends import engine as engines
    from harness.backends.offline import Offline
    from harness.config import compose_config
    from harness.sweep.runner import prepare, warm_up

    console.quiet_libraries()
    overrides = list(args.overrides)
    if not overrides:
        from train.tiny import build_random_pair

        target, _ = build_random_pair(Path(tempfile.mkdtemp()) / "pair")
        overrides = [f"models.targets.cot={target}", "variant=cot", "limit=32", "max_tokens=96"]
    cfg = compose_config([*overrides, "spec.k=0", "pairing=sequential", "concurrency=1"])
    job = prepare(cfg)
    from harness.measure import pairing

    live = [engine.llm for engine, _ in engines.get_all((job.spec, job.spec))]  # [1] started first
    if args.a_first:
        live.reverse()
    llms = {pairing.JOB: Offline(live[0]), pairing.BASELINE: Offline(live[1])}
    for llm in llms.values():
        warm_up(job, llm)
    first = "A" if args.a_first else "B"
    print(f"A/A on {job.spec.target}: {len(job.requests)} problems, max_tokens {job.max_tokens}")
    print(f"{first} started first")
    print(f"{'pattern':<8} {'settle':<7} {'round':<6} {'A/A':>6} {'switch':>7}")
    try:
        for r in range(args.rounds):
            for pattern, settle in ORDERS:
                ratio, switch = measure(job, llms, pattern, settle)
                print(f"{pattern:<8} {settle!s:<7} {r:<6} {ratio:6.3f} {switch:7.3f}", flush=True)
    finally:
        engines.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
