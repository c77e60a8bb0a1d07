"""Is the A/A gap the engine instance? One fixed request timed in fresh instances (prints figures).

    python bench/instances.py                          # a random model of the tiny target's shape
    python bench/instances.py --instances 6 --passes 8
    PYTHONHASHSEED=0 python bench/instances.py         # a setting under test: env or overrides
    python bench/instances.py --csv out.csv --label default   # append each pass's row to a table
    python bench/instances.py --summary out.csv      # each setting's figures from such a table
    python bench/instances.py --paired --instances 12   # six live pairs taking turns
    python bench/instances.py experiment=smollm2 variant=base dataset=gsm8k \\
        datasets_dir=path/to/datasets max_tokens=128

Starts ``--instances`` fresh engines of the job's plain target one after another (one alive
at a time), warms each up, then runs the job's first problem, greedy, ``--passes`` times in
each, nothing else in flight: the same tokens through the same code in every instance. Prints
each instance's time per output token, the spread of the instance means, and a one-way ANOVA
of instance (``scipy.stats.f_oneway``): do instances differ by more than their passes vary?

With ``--paired`` the instances come in live pairs, started one after the other as a job
starts its two engines, whose passes take turns (first, second, then second, first, ...):
the two share every minute, so their ratio (first started / second started) is the instance
effect without the machine's drift, and its sign across pairs says whether start order
matters.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.backends.offline import Offline
    from harness.records import Completion
    from harness.sweep.runner import PreparedJob


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="job overrides (default: a random target)")
    parser.add_argument("--instances", type=int, default=6, help="fresh engines, one at a time")
    parser.add_argument("--passes", type=int, default=8, help="timed runs of the request in each")
    parser.add_argument(
        "--paired", action="store_true", help="live pairs taking turns (an even --instances)"
    )
    parser.add_argument(
        "--csv", type=Path, help="append (label, instance, pass, tpot_ms, pair, cpu) rows"
    )
    parser.add_argument("--label", default="default", help="the setting's name in --csv")
    parser.add_argument("--summary", type=Path, help="print each label's figures of a --csv table")
    return parser


def tpot_ms_of_passes(job: PreparedJob, backend: Offline, passes: int) -> list[float]:
    """Milliseconds per output token after the first, of ``passes`` runs of the job's first
    prompt (a pass of fewer than two tokens has none)."""
    from harness.backends.arrivals import Load
    from harness.metrics import tpot

    request = job.requests[0]
    params = job.sampling_params(job.max_tokens)
    out: list[float] = []

    def on_output(_: int, completion: Completion) -> None:
        seconds = tpot(completion.decode_s, len(completion.token_ids))
        if seconds is not None:
            out.append(round(seconds * 1e3, 4))

    for _ in range(passes):
        backend.generate([request.prompt_token_ids], params, Load(1), on_output)
    return out


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    if args.summary:
        return summarize(args.summary)
    if args.instances < 2 or args.passes < 2:
        print("error: --instances and --passes must be at least 2", file=sys.stderr)
        return 2
    if args.paired and args.instances % 2:
        print(f"error: --paired needs an even --instances, not {args.instances}", file=sys.stderr)
        return 2
    from harness import console

    console.quiet_libraries()
    overrides = list(args.overrides)
    with tempfile.TemporaryDirectory() as folder:
        if not overrides:
            from transformers import AutoTokenizer

            from train.tiny import TinyModelConfig, build_random_model, build_random_pair

            pair, _ = build_random_pair(Path(folder) / "pair")
            shape = TinyModelConfig(128, 4, 512)  # the tiny target's shape
            tokenizer = AutoTokenizer.from_pretrained(pair)
            target = build_random_model(shape, tokenizer, Path(folder) / "t", 0)
            overrides = [f"models.targets.cot={target}", "variant=cot", "max_tokens=128"]
        return measure(args, overrides)


def measure(args: argparse.Namespace, overrides: list[str]) -> int:
    """Time the instances and print (and append) the figures."""
    import pandas as pd

    from harness.backends import engine as engines
    from harness.config import compose_config
    from harness.provenance import cpu_label
    from harness.sweep.runner import prepare

    cfg = compose_config([*overrides, "spec.k=0", "pairing=sequential", "limit=1"])
    job = prepare(cfg)
    mode = "live pairs taking turns" if args.paired else "one at a time"
    cpu = cpu_label()  # the vector ISA picks the kernels
    print(f"{job.spec.target}: {args.instances} instances ({mode}) x {args.passes} passes, "
          f"max_tokens {job.max_tokens}, on {cpu}")  # fmt: skip
    print(f"{'instance':<9} {'TPOT ms, mean':>14} {'passes CV':>10}")
    try:
        groups = (timed_pairs if args.paired else timed_alone)(job, args.instances, args.passes)
    finally:
        engines.clear()
    if args.csv:
        rows = [{"label": args.label, "instance": i, "pass": p, "tpot_ms": t,
                 "pair": i // 2 if args.paired else None, "cpu": cpu}
                for i, g in enumerate(groups) for p, t in enumerate(g)]  # fmt: skip
        pd.DataFrame(rows).to_csv(args.csv, mode="a", header=not args.csv.exists(), index=False)
    print(spread(groups))
    if args.paired:
        print(pairs_line(groups))
    return 0


def _show(i: int, tpot_ms: list[float]) -> None:
    mean = statistics.fmean(tpot_ms)
    print(f"{i:<9} {mean:14.3f} {statistics.stdev(tpot_ms) / mean:10.1%}", flush=True)


def timed_alone(job: PreparedJob, instances: int, passes: int) -> list[list[float]]:
    """Each instance's passes in ms, the instances fresh and one alive at a time."""
    from harness.backends import engine as engines
    from harness.backends.offline import Offline
    from harness.sweep.runner import warm_up

    groups = []
    for i in range(instances):
        engines.clear()  # a fresh instance
        backend = Offline(engines.get(job.spec)[0].llm)
        warm_up(job, backend)
        groups.append(tpot_ms_of_passes(job, backend, passes))
        _show(i, groups[-1])
    return groups


def timed_pairs(job: PreparedJob, instances: int, passes: int) -> list[list[float]]:
    """Each instance's passes in ms, in fresh live pairs (instance 2p started before 2p + 1)
    whose passes alternate first/second, then second/first, and so on."""
    from harness.backends import engine as engines
    from harness.backends.offline import Offline
    from harness.sweep.runner import warm_up

    groups = []
    for p in range(instances // 2):
        engines.clear()
        started = engines.get_all((job.spec, job.spec))  # the second entry starts first
        pair = [Offline(started[1][0].llm), Offline(started[0][0].llm)]
        for backend in pair:
            warm_up(job, backend)
        times: list[list[float]] = [[], []]
        for n in range(passes):
            for side in (0, 1) if n % 2 == 0 else (1, 0):
                times[side] += tpot_ms_of_passes(job, pair[side], 1)
        for side in (0, 1):
            _show(2 * p + side, times[side])
        groups += times
    return groups


def spread(groups: list[list[float]]) -> str:
    """One line: the instance means' range and spread, the passes' spread within an
    instance, and a one-way ANOVA of instance."""
    from scipy import stats

    means = [statistics.fmean(g) for g in groups]
    within = statistics.fmean(statistics.stdev(g) / statistics.fmean(g) for g in groups)
    anova = stats.f_oneway(*groups)
    return (f"instance means: {min(means):.3f}-{max(means):.3f} ms, "
            f"(max - min) / median {(max(means) - min(means)) / statistics.median(means):.1%}, "
            f"CV {statistics.stdev(means) / statistics.fmean(means):.1%}; within an instance "
            f"CV {within:.1%}; ANOVA F = {anova.statistic:.2f}, p = {anova.pvalue:.2g}")  # fmt: skip


def pairs_line(groups: list[list[float]]) -> str:
    """One line for live pairs (instances 2p, 2p + 1): each pair's ratio of mean TPOT, first
    started over second, their median, how many read above 1 (first started slower), and an
    F test of instance within pair (a nested ANOVA, the pair as a block that shares its
    minutes): do two live instances differ by more than their passes vary?"""
    from scipy import stats

    means = [statistics.fmean(g) for g in groups]
    ratios = [means[i] / means[i + 1] for i in range(0, len(means), 2)]
    above = sum(r > 1 for r in ratios)
    between = 0.0
    for i in range(0, len(groups), 2):
        pair = statistics.fmean(groups[i] + groups[i + 1])
        between += sum(len(groups[j]) * (means[j] - pair) ** 2 for j in (i, i + 1))
    within = sum((t - m) ** 2 for g, m in zip(groups, means, strict=True) for t in g)
    df_between, df_within = len(ratios), sum(len(g) - 1 for g in groups)
    f = (between / df_between) / (within / df_within)
    return (f"pairs, first started / second: {' '.join(f'{r:.3f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.3f}; above 1 in {above} of {len(ratios)}; "
            f"instance within pair F = {f:.2f}, p = {stats.f.sf(f, df_between, df_within):.2g}")  # fmt: skip


def summarize(table: Path) -> int:
    """Print :func:`spread` for each label of a ``--csv`` table, in the table's order (and
    :func:`pairs_line` for a label of live pairs)."""
    import pandas as pd

    rows = pd.read_csv(table)
    for label, runs in rows.groupby("label", sort=False):
        groups = [list(g["tpot_ms"]) for _, g in runs.groupby("instance")]
        paired = "pair" in runs and runs["pair"].notna().all()
        mode = " (live pairs)" if paired else ""
        cpu = f" on {runs['cpu'].iloc[0]}" if "cpu" in runs else ""  # older tables have none
        print(f"{label}: {len(groups)} instances{mode} x {len(groups[0])} passes{cpu}; "
              f"{spread(groups)}")  # fmt: skip
        if paired:
            print(f"{label}: {pairs_line(groups)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
