"""Candidate drafts and EAGLE-3 heads for one target, compared before any K > 0 run
(prints figures).

    python bench/drafts.py RUN_DIR --drafts DIR [DIR ...] [--ks 1,3,5]

``RUN_DIR`` is a complete K = 0 run of the target. For each candidate (a draft model or a
speculators EAGLE-3 checkpoint): pre-flight acceptance, the calibrated verify step at each K
and the predicted TPOT speedup, as the report predicts a sweep's rows (docs/COST_MODEL.md).
Keep the candidates at distinct paths: results are named by path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from harness.checks import check_model_dir, command  # noqa: E402


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    from harness.measure.preflight import parse_ks

    parser.add_argument("run", type=Path, help="a complete K = 0 run directory of the target")
    parser.add_argument("--drafts", nargs="+", required=True, help="candidate draft directories")
    parser.add_argument("--ks", type=parse_ks, default=[1, 3, 5], help="Ks (default 1,3,5)")


def candidate_config(summary: dict, draft: str, k: int):
    """The run's job config with ``draft`` (a draft model or an EAGLE-3 head) as its
    speculator at ``k``."""
    from omegaconf import OmegaConf

    from harness import speculators

    cfg = OmegaConf.create(summary["config"])
    cfg.models.drafts["candidate"] = draft
    cfg.variant.draft, cfg.spec.k = "candidate", k
    cfg.variant.method = speculators.of_checkpoint(draft).method
    return cfg


def mean_tpot_s(run_dir: Path) -> float:
    """The run's mean TPOT over its requests that have one (the cost model's T_target)."""
    import pyarrow.parquet as pq

    from harness import results

    tpot = pq.read_table(run_dir / results.REQUESTS, columns=["tpot_s"]).column(0).to_pylist()
    tpot = [t for t in tpot if t is not None]
    return sum(tpot) / len(tpot)


def describe(draft: str) -> str:
    """What a draft or head directory is (its family's words), and how it was trained."""
    from harness import speculators
    from harness.checks import model_config
    from harness.manifest import read_manifest

    shape = speculators.of_checkpoint(draft).describe(model_config(draft) or {})
    manifest = read_manifest(draft)
    if manifest is None:
        return f"{shape}, untrained"
    objective = manifest.config.get("objective")
    return ", ".join([shape, *([objective] if objective else []), f"{manifest.steps} steps"])


def compare(run_dir: Path, drafts: list[str], ks: list[int]) -> list[dict]:
    """One row per draft and K: acceptance, E, costs and the predicted TPOT speedup."""
    from harness import results
    from harness.backends import engine
    from harness.calibration import record
    from harness.config import ConfigError
    from harness.measure import preflight
    from harness.sweep import calibrate
    from reports.theory import predict_from_costs

    summary = results.read_summary(run_dir)
    if summary is None or summary.get("k") != 0:
        raise ConfigError(f"{run_dir}: not a complete K = 0 run")
    concurrency = str(summary["config"]["concurrency"])
    t_target = mean_tpot_s(run_dir)
    out_dir = run_dir.parent / record.CALIBRATION
    rows = []
    try:
        for draft in drafts:
            result = preflight.estimate(run_dir, draft, ks)
            preflight.write(run_dir, draft, result)
            # the target and the draft alone at K = 0 (for c), the pair at each K
            cfgs = [candidate_config(summary, draft, k) for k in [0, *ks]]
            per_unit = {}
            for entry, concurrencies in calibrate.entries(cfgs).items():
                if entry.k == 0 and entry.draft:  # speculation off: no K schedule here
                    continue
                path = calibrate.calibrate(entry, concurrencies, out_dir, False)
                measured = record.load(path)["measurements"][concurrency]
                per_unit[entry.target, entry.k] = measured["per_unit_s"]
            target = summary["target"]
            t_draft, t_plain = per_unit.get((draft, 0), float("nan")), per_unit[target, 0]
            about = describe(draft)
            for k in ks:
                ratios = preflight.steps_per_token(result, k)
                model = predict_from_costs(
                    sum(ratios) / len(ratios), t_target, per_unit[target, k], t_draft, t_plain
                )
                rows.append({
                    "draft": draft, "about": about, "k": k, "T_target ms": t_target * 1e3,
                    "agreement": result["agreement"],
                    "acceptance": result["ks"][str(k)]["acceptance_rate"],
                    "E": float(model.e), "c": float(model.c), "T_step ms": model.t_step * 1e3,
                    "speedup": float(model.speedup),
                })  # fmt: skip
    finally:
        engine.clear()
    return rows


@command(doc=__doc__)
def main(argv: list[str]) -> int:
    """Compare the drafts; print one table row per draft and K (2: bad input)."""
    parser = argparse.ArgumentParser(prog="python bench/drafts.py")
    add_cli_args(parser)
    args = parser.parse_args(argv)
    for draft in args.drafts:
        check_model_dir("--drafts", draft)
    rows = compare(args.run, args.drafts, args.ks)
    print(f"\n{args.run}: T_target {rows[0]['T_target ms']:.1f} ms per token")
    print("| draft | what | K | agreement | acceptance | E | c | T_step ms | predicted speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['draft']} | {r['about']} | {r['k']} | {r['agreement']:.3f} | "
              f"{r['acceptance']:.3f} | {r['E']:.2f} | {r['c']:.2f} | {r['T_step ms']:.1f} | "
              f"{r['speedup']:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
