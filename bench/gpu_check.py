"""``make gpu-check``: the tiny world on one NVIDIA GPU, checked against what the CPU says.

    python bench/gpu_check.py                         # about 5 minutes on one GPU
    python bench/gpu_check.py --limit 20 engine.enforce_eager=false   # then harness overrides

An interleaved sweep (``results/gpu-check``, run afresh) of the tiny CoT target on
``engine=cuda`` in float32 (the CPU pre-flight's precision): plain decoding (the A/A pair)
and, at K = 3, a draft model (``cot_sd``), an EAGLE-3 head (``cot_eagle3``), prompt lookup
(``cot_ngram``) and suffix decoding (``cot_suffix``); then the CPU pre-flight of the draft
and the head on the plain run's outputs, then the qwen2.5 sweep's plan (``plan=true``).
Prints one table, a row per speculator: lossless (greedy outputs equal to the plain target's),
acceptance beside the pre-flight's prediction, and the paired TPOT speedup with its 95%
interval. Exits 1 when a speculator is not lossless at temperature 0, its acceptance is
further than ``--tolerance`` from the pre-flight's, or a job or the plan failed. Without a
GPU (no ``nvidia-smi``, or torch sees no CUDA device) it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from harness.checks import command  # noqa: E402
from harness.errors import ConfigError  # noqa: E402
from reports import load  # noqa: E402

SWEEP = "gpu-check"
BASELINE = "cot"  # the plain target: the A/A pair, and the outputs the pre-flight reads
# a draft model, an EAGLE-3 head, prompt lookup, suffix decoding
SPECULATORS = ("cot_sd", "cot_eagle3", "cot_ngram", "cot_suffix")
K = 3
LIMIT = 10  # problems: about 1,000 drafted tokens per speculator at K = 3
# |measured - pre-flight| acceptance allowed: the CPU replay of the tiny CoT pair predicted
# 0.861 against 0.866 measured at K = 3 (docs/METRICS.md); the GPU's kernels may flip a few
# near-tied greedy choices more
TOLERANCE = 0.05
PLAN = ("experiment=qwen2.5", "engine=cuda", "plan=true")
EMPTY = pd.DataFrame(columns=["variant", "k"])  # the table of a sweep with no run


def no_gpu() -> str | None:
    """Why this machine cannot run the check (None: one NVIDIA GPU or more is visible)."""
    from harness.config import cuda_visible

    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    if not cuda_visible():
        return "torch sees no CUDA device"
    return None


def sweep_overrides(results_dir: Path, limit: int, extra: Sequence[str] = ()) -> list[str]:
    """The ``python -m harness -m`` overrides of the check's sweep (``extra`` last)."""
    return [
        # the tiny models hold 1,024 positions; few sequences keep CUDA graph capture short
        "experiment=tiny", "engine=cuda", "engine.dtype=float32", "engine.max_model_len=1024",
        "engine.max_num_seqs=8",
        f"variant={','.join((BASELINE, *SPECULATORS))}", "dataset=synth_easy", f"spec.k=0,{K}",
        f"limit={limit}", "pairing=interleaved", "temperature=0.0", "calibrate=false",
        "force=true", f"results_dir={results_dir}", f"sweep={SWEEP}", *extra,
    ]  # fmt: skip


def verdicts(
    table: pd.DataFrame,
    tolerance: float = TOLERANCE,
    expected: Sequence[str] = SPECULATORS,
    k: int = K,
) -> pd.DataFrame:
    """One row per ``expected`` variant at ``k`` from the report's table
    (``reports.tables.build_tables``): lossless (None when not greedy or not measured),
    acceptance, pre-flight acceptance, TPOT speedup and its interval, and ``problem``
    ("" when the row is as it should be)."""
    rows = []
    for variant in expected:
        found = table[(table["variant"] == variant) & (table["k"] == k)]
        if found.empty:
            rows.append({"speculator": variant, "problem": f"no K = {k} run (a failed job?)"})
            continue
        r = found.iloc[0]
        greedy = r["temperature"] == 0 and pd.notna(r.get("lossless_fraction"))
        lossless = bool(r["lossless_fraction"] == 1) if greedy else None
        measured, predicted = r["acceptance_rate"], r.get("acceptance_preflight", float("nan"))
        problems = []
        if r["temperature"] == 0 and not lossless:
            share = r.get("lossless_fraction")
            said = "not measured" if pd.isna(share) else f"{share:.3f} of outputs equal"
            problems.append(f"not lossless at temperature 0 ({said})")
        if r["draft"] != load.NO_DRAFT and pd.isna(predicted):  # a draft model or a head
            problems.append("no pre-flight acceptance")
        if pd.notna(predicted) and not abs(measured - predicted) <= tolerance:
            problems.append(f"acceptance {measured:.3f} is more than {tolerance} from the "
                            f"pre-flight's {predicted:.3f}")  # fmt: skip
        lost = int(r.get("num_failed", 0) or 0) + int(r.get("num_missing", 0) or 0)
        if lost:
            problems.append(f"{lost} request(s) failed or missing")
        rows.append({
            "speculator": variant, "lossless": lossless, "acceptance": measured,
            "acceptance_preflight": predicted, "speedup_tpot": r["speedup_tpot"],
            "speedup_tpot_lo": r["speedup_tpot_lo"], "speedup_tpot_hi": r["speedup_tpot_hi"],
            "problem": "; ".join(problems),
        })  # fmt: skip
    columns = ["speculator", "lossless", "acceptance", "acceptance_preflight", "speedup_tpot",
               "speedup_tpot_lo", "speedup_tpot_hi", "problem"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def render(rows: pd.DataFrame) -> str:
    """The verdict rows as one markdown table."""
    from reports.markdown import ci, num, table

    def lossless(r: pd.Series) -> str:
        return "–" if pd.isna(r["lossless"]) else ("yes" if r["lossless"] else "no")

    return table(rows, [
        ("speculator", lambda r: r["speculator"]), ("lossless", lossless),
        ("acceptance", lambda r: num(r["acceptance"])),
        ("pre-flight", lambda r: num(r["acceptance_preflight"])),
        (f"TPOT speedup, K = {K}", lambda r: ci(r, "speedup_tpot", 2)),
        ("verdict", lambda r: r["problem"] or "ok"),
    ])  # fmt: skip


def preflight_runs(runs: pd.DataFrame) -> list[str]:
    """The CPU pre-flight of every draft and head the K > 0 runs used, on the plain
    target's K = 0 run (written beside it, where the report reads it); what failed."""
    from harness.measure import preflight

    if runs.empty:
        return []
    plain = runs[(runs["variant"] == BASELINE) & (runs["k"] == 0)]
    drafts = sorted(set(runs.loc[runs["k"] > 0, "draft"]) - {load.NO_DRAFT})
    failed = []
    for run_dir in map(Path, plain["path"]):
        for draft in drafts:
            try:
                preflight.write(run_dir, draft, preflight.estimate(run_dir, draft, [K]))
            except ValueError as exc:  # ConfigError: a draft or run it cannot replay
                failed.append(f"pre-flight of {draft}: {exc}")
    return failed


def harness(*overrides: str) -> int:
    """``python -m harness -m <overrides>`` in the checkout; its exit code."""
    return subprocess.run([sys.executable, "-m", "harness", "-m", *overrides], cwd=ROOT).returncode


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/gpu_check.py",
        description=__doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"problems (default {LIMIT})")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help=f"largest |measured - pre-flight| acceptance (default {TOLERANCE})",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="default: results"
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="replicates per interval")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="harness overrides")
    return parser


@command()
def main(argv: list[str]) -> int:
    """Run the check; print the table. Returns the exit code (1: a difference, 2: bad input)."""
    args = make_parser().parse_args(argv)
    if args.limit < 1:
        raise ConfigError(f"--limit={args.limit}: give at least 1 problem")
    if not 0 < args.tolerance < 1:
        raise ConfigError(f"--tolerance={args.tolerance}: give a share between 0 and 1")
    why = no_gpu()
    if why:
        print(f"gpu-check: no NVIDIA GPU here ({why}); nothing to check")
        return 0
    from reports import tables

    start = time.monotonic()
    failures = []
    if harness(*sweep_overrides(args.results_dir, args.limit, args.overrides)):
        failures.append("the sweep exited with an error (see its failures.jsonl)")
    found = load.load(args.results_dir, [SWEEP])
    failures += [f"{s.path}: {s.reason}" for s in found.skipped]
    failures += preflight_runs(found.runs)
    found = load.load(args.results_dir, [SWEEP])  # with the pre-flight files
    if harness(*PLAN):
        failures.append(f"the qwen2.5 plan failed ({' '.join(PLAN)})")
    table = tables.build_tables(found, args.bootstrap).table if len(found.runs) else EMPTY
    rows = verdicts(table, args.tolerance)
    print(f"\ngpu-check of {args.results_dir / SWEEP}:\n\n{render(rows)}\n")
    failures += [f"{r.speculator}: {r.problem}" for r in rows.itertuples() if r.problem]
    for failure in failures:
        print(f"FAIL {failure}")
    took = time.monotonic() - start
    print(f"gpu-check: {'failed' if failures else 'passed'} in {took / 60:.1f} min")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
