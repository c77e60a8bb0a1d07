"""Do fresh engine processes pick the same oneDNN kernels? (prints figures)

    python bench/kernels.py                              # a random tiny target
    python bench/kernels.py --processes 3 --csv kernels.csv --label smollm2 \\
        experiment=smollm2 variant=base_cot dataset=gsm8k datasets_dir=path/to/datasets

Runs ``--processes`` fresh Python processes one after another, each starting one engine of
the job's plain target with oneDNN's creation log on (``ONEDNN_VERBOSE=profile_create``) and
answering the job's first problem. Prints each process's count of created oneDNN primitives
(kind, implementation, memory formats, shapes) and whether every process created the same
ones: a kernel picked per process would show here.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CREATE = "onednn_verbose,v1,primitive,create:"
Kernels = collections.Counter[tuple[str, ...]]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="job overrides (default: a random target)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes, one at a time")
    parser.add_argument("--csv", type=Path, help="append (label, process, kernel..., count) rows")
    parser.add_argument("--label", default="default", help="the target's name in --csv")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def kernels(log: str) -> Kernels:
    """The primitives a oneDNN creation log made: (kind, implementation, memory formats,
    shapes) -> how many times, cache hits and misses alike."""
    out: Kernels = collections.Counter()
    for line in log.splitlines():
        if line.startswith(CREATE):
            # create:cache_hit|miss, engine, kind, implementation, prop, formats, attrs, aux,
            # shapes, ms
            fields = line.split(",")
            out[(fields[5], fields[6], fields[8], fields[11])] += 1
    return out


def child(overrides: list[str]) -> None:
    """Start one engine and answer the job's first problem (oneDNN logs to stdout)."""
    from harness import console
    from harness.backends import engine as engines
    from harness.backends.arrivals import Load
    from harness.backends.offline import Offline
    from harness.config import compose_config
    from harness.sweep.runner import prepare

    console.quiet_libraries()
    job = prepare(compose_config([*overrides, "spec.k=0", "pairing=sequential", "limit=1"]))
    try:
        backend = Offline(engines.get(job.spec)[0].llm)
        prompt = job.requests[0].prompt_token_ids
        backend.generate([prompt], job.sampling_params(job.max_tokens), Load(1), lambda *_: None)
    finally:
        engines.clear()


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    if args.child:
        child(args.overrides)
        return 0
    if args.processes < 2:
        print(f"error: --processes must be at least 2, not {args.processes}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        overrides = list(args.overrides)
        if not overrides:
            from train.tiny import build_random_pair

            target, _ = build_random_pair(Path(folder) / "pair")
            overrides = [f"models.targets.cot={target}", "variant=cot", "max_tokens=32"]
        env = {**os.environ, "ONEDNN_VERBOSE": "profile_create"}
        found = []
        for i in range(args.processes):
            command = [sys.executable, __file__, "--child", *overrides]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"error: process {i} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                return 1
            found.append(kernels(done.stdout))
            print(f"process {i}: {sum(found[-1].values())} primitives created, "
                  f"{len(found[-1])} distinct", flush=True)  # fmt: skip
    if args.csv:
        import pandas as pd

        rows = [{"label": args.label, "process": i, "kind": k[0], "implementation": k[1],
                 "formats": k[2], "shapes": k[3], "count": n}
                for i, got in enumerate(found) for k, n in sorted(got.items())]  # fmt: skip
        pd.DataFrame(rows).to_csv(args.csv, mode="a", header=not args.csv.exists(), index=False)
    print(verdict(found))
    return 0


def verdict(found: list[Kernels]) -> str:
    """One line: whether every process created the same primitives, and their implementations."""
    if not any(found):
        return "no oneDNN primitive was created (the engine does not use oneDNN here)"
    names = sorted({f"{kind} {impl}" for got in found for kind, impl, _, _ in got})
    same = all(got == found[0] for got in found[1:])
    head = "the same primitives in every process" if same else "the processes differ"
    return f"{head}: {len(found[0])} distinct; implementations: {', '.join(names)}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
