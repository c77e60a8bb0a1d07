"""Where a vLLM server's CPU goes once its requests end (prints figures).

    python bench/idle_cpu.py                       # a random model of the tiny target's shape
    python bench/idle_cpu.py --rounds 5 --csv out.csv
    python bench/idle_cpu.py experiment=smollm2 variant=base   # a job's plain target

Starts one server of the job's plain target, then ``--rounds`` times: serves closed-loop
requests (``--concurrency`` in flight) for ``--busy`` seconds, stops sending, and samples
the CPU seconds each of the server's processes (API server, engine core, worker) spends in
every ``--interval`` of the ``--after`` seconds that follow. A side of a paired comparison
that is out of its window costs its partner what it spends here. Then the same with the
server's processes stopped (SIGSTOP) after its requests, and whether it answers again once
continued (SIGCONT).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any directory


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="job overrides (default: a random target)")
    parser.add_argument("--rounds", type=int, default=3, help="busy spells, each then sampled")
    parser.add_argument("--busy", type=float, default=3.0, help="seconds of requests per round")
    parser.add_argument("--after", type=float, default=3.0, help="seconds sampled after them")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds per sample")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--csv", type=Path, help="write (stopped, round, t_s, process, cpu_s)")
    return parser


def _serve(url: str, model: str, seconds: float, concurrency: int) -> int:
    """Closed-loop completions for ``seconds``; the number answered."""
    body = json.dumps({"model": model, "prompt": [5, 6, 7, 8], "max_tokens": 64,
                       "temperature": 0, "ignore_eos": True}).encode()  # fmt: skip
    end, done = time.monotonic() + seconds, []

    def loop() -> None:
        while time.monotonic() < end:
            request = urllib.request.Request(
                f"{url}/v1/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
            done.append(1)

    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(done)


def _role(process: object) -> str:
    name = " ".join(process.cmdline())  # type: ignore[attr-defined]
    for role in ("api_server", "EngineCore", "Worker"):
        if role in name:
            return role
    return "helper"


def measure(args: argparse.Namespace, overrides: list[str]) -> list[dict]:
    """The rows of every round (see the module docstring)."""
    import psutil

    from harness.backends import server as servers
    from harness.backends.engine import EngineSpec
    from harness.config import compose_config

    spec = EngineSpec.from_config(compose_config([*overrides, "spec.k=0"]))
    with tempfile.TemporaryDirectory() as folder:
        server = servers.start(spec, Path(folder) / "server.log", 600)
        try:
            root = psutil.Process(server.process.pid)
            processes = [root, *root.children(recursive=True)]
            _serve(server.url, spec.target, args.busy, args.concurrency)  # warm-up
            rows = []
            for stopped in (False, True):
                for r in range(args.rounds):
                    _serve(server.url, spec.target, args.busy, args.concurrency)
                    if stopped:
                        for p in processes:
                            p.send_signal(signal.SIGSTOP)
                    before = [sum(p.cpu_times()[:2]) for p in processes]
                    for i in range(round(args.after / args.interval)):
                        time.sleep(args.interval)
                        now = [sum(p.cpu_times()[:2]) for p in processes]
                        rows += [{"stopped": stopped, "round": r, "t_s": (i + 1) * args.interval,
                                  "process": _role(p), "cpu_s": round(n - b, 3)}
                                 for p, n, b in zip(processes, now, before, strict=True)]  # fmt: skip
                        before = now
                    if stopped:
                        for p in processes:
                            p.send_signal(signal.SIGCONT)
                        answered = _serve(server.url, spec.target, 1.0, 1)
                        print(
                            f"stopped round {r}: {answered} request(s) answered in 1 s after SIGCONT"
                        )
        finally:
            servers.stop(server)
    return rows


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    import pandas as pd

    from harness import console
    from harness.provenance import cpu_label

    console.quiet_libraries()
    with tempfile.TemporaryDirectory() as folder:
        overrides = list(args.overrides)
        if not overrides:
            from train.tiny import build_random_pair

            target, _ = build_random_pair(Path(folder) / "pair")
            overrides = [f"models.targets.cot={target}", "variant=cot"]
        table = pd.DataFrame(measure(args, overrides))
    print(f"CPU seconds per {args.interval:g} s after the last request, mean over "
          f"{args.rounds} rounds, on {cpu_label()}:")  # fmt: skip
    mean = table.groupby(["stopped", "t_s", "process"])["cpu_s"].mean().unstack("process")
    print(mean.round(3).to_string())
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
