"""``python -m reports.simulation_report``: the Monte Carlo of :mod:`reports.simulate`,
drawn and written as ``<out>/figures/*.png`` + ``<out>/SIMULATION.md``.

    python -m reports.simulation_report --out reports/out/simulate --steps 20000 --seed 0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports import markdown, simulate, theory_figures


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """The simulator's command-line options."""
    parser.add_argument("--out", type=Path, default=Path("reports/out/simulate"), help="output dir")
    parser.add_argument("--steps", type=int, default=20_000, help="verify steps per (a, K)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--draft-sample-method",
        choices=simulate.METHODS,
        default="greedy",
        help="how the draft proposes in the tokens/speedup tables (default: greedy, vLLM's)",
    )


def main(args: argparse.Namespace) -> Path:
    """Simulate, then write figures/*.png and SIMULATION.md under ``args.out``."""
    if args.steps < 2:
        raise SystemExit(f"--steps={args.steps}: need at least 2 verify steps")
    sim = simulate.run(args.steps, args.seed, args.draft_sample_method)
    shown = theory_figures.render_simulation(sim, args.out / "figures")
    path = args.out / "SIMULATION.md"
    path.write_text(markdown.simulation_report(sim, shown, args.steps, args.seed))
    return path


if __name__ == "__main__":
    cli = argparse.ArgumentParser(
        prog="python -m reports.simulation_report",
        description="Monte Carlo of speculative decoding vs the analytical model.",
    )
    add_cli_args(cli)
    print(f"wrote {main(cli.parse_args())}")
