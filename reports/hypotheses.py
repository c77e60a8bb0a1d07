"""The seed study's three hypotheses, each judged on measured contrasts with 95% CIs.

The judging rules are :data:`RULES` (printed in the report). Targets are told apart by
their role in the config (``target_role``: base, cot, cod), not by model path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from reports import aggregate, bootstrap

BASE_TARGET, COT_TARGET, COD_TARGET = "base", "cot", "cod"  # target roles of the seed study
MINIMAL_LOSS = 0.05  # "minimal accuracy loss": at most 5 percentage points
HYPOTHESES = {
    1: "Reasoning fine-tuning improves accuracy",
    2: "Speculative decoding cuts latency without accuracy loss",
    3: "CoD cuts tokens with minimal accuracy loss",
}
RATIO = {r.name: r for r in aggregate.RATIOS}
RULES = f"""\
Each comparison is a paired bootstrap over the problems both sides answered, on the
headline rows (lowest concurrency; K = 0, or a draft variant's best K).

1. Fine-tuning: each fine-tuned target (no draft) vs the base target. Supported when
   the CI of accuracy(fine-tuned) - accuracy(base) is above 0, refuted when below 0.
2. Speculation: each draft variant at its best K vs its own target at K = 0. Supported
   when the TPOT speedup's CI is above 1 and the accuracy difference's CI is not below
   0; refuted when the speedup's CI is below 1 or the accuracy difference's CI is below 0.
3. Chain of Draft: the CoD target vs the CoT target (no draft). Supported when the CI of
   tokens(CoD) / tokens(CoT) is below 1 and the accuracy difference's CI stays above
   -{MINIMAL_LOSS} ("minimal loss"); refuted when the token ratio's CI is above 1 or the
   accuracy difference's CI is below -{MINIMAL_LOSS}.

Anything else is inconclusive; "mixed" means the comparisons disagree."""


@dataclass(frozen=True)
class Verdict:
    """One measured comparison for one hypothesis."""

    hypothesis: int
    sweep_id: str
    dataset: str
    comparison: str
    evidence: str
    verdict: str  # supported | refuted | inconclusive

    def to_row(self) -> dict[str, object]:
        """Flat dict for the verdict table."""
        return asdict(self)


def _ci(x: tuple[float, float, float], digits: int = 3, signed: bool = False) -> str:
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    return f"{f.format(x[0])} [{f.format(x[1])}, {f.format(x[2])}]"


def _judge(support: bool, refute: bool) -> str:
    return "refuted" if refute else "supported" if support else "inconclusive"


class _Contrasts:
    """Paired contrasts between groups of one request table."""

    def __init__(self, requests: pd.DataFrame, n_boot: int, seed: int):
        self.requests, self.n_boot, self.seed = requests, n_boot, seed

    def of(self, group: pd.Series, keys: tuple[str, ...] = aggregate.GROUP) -> pd.DataFrame:
        return aggregate.select(self.requests, group, keys)

    def __call__(self, x: pd.DataFrame, y: pd.DataFrame, stat: str, how: str):
        return aggregate.contrast(x, y, RATIO[stat], how, self.n_boot, self.seed)


def _fine_tuning(rows: pd.DataFrame, contrast: _Contrasts) -> list[tuple[str, str, str]]:
    plain = rows[rows["draft"] == "none"]
    base = plain[plain["target_role"] == BASE_TARGET]
    out = []
    for _, b in base.iterrows():
        for _, v in plain[plain["target_role"] != BASE_TARGET].iterrows():
            d = contrast(contrast.of(b), contrast.of(v), "accuracy", "difference")
            evidence = f"accuracy {v['accuracy']:.3f} vs {b['accuracy']:.3f}: {_ci(d, signed=True)}"
            out.append((f"{v['variant']} vs {b['variant']}", evidence, _judge(d[1] > 0, d[2] < 0)))
    return out


def _speculation(rows: pd.DataFrame, contrast: _Contrasts) -> list[tuple[str, str, str]]:
    out = []
    for _, v in rows[rows["draft"] != "none"].iterrows():
        base = contrast.of(v, aggregate.BASELINE)
        base = base[base["k"] == 0]
        if base.empty:
            continue
        d = contrast(base, contrast.of(v), "accuracy", "difference")
        s = (v["speedup_tpot"], v["speedup_tpot_lo"], v["speedup_tpot_hi"])
        evidence = f"TPOT speedup {_ci(s, 2)} at K={v['k']}; accuracy {_ci(d, signed=True)}"
        verdict = _judge(s[1] > 1 and d[2] >= 0, s[2] < 1 or d[2] < 0)
        out.append(
            (f"{v['variant']} (K={v['k']}) vs {v['target_role']} target (K=0)", evidence, verdict)
        )
    return out


def _chain_of_draft(rows: pd.DataFrame, contrast: _Contrasts) -> list[tuple[str, str, str]]:
    plain = rows[rows["draft"] == "none"]
    out = []
    for _, cot in plain[plain["target_role"] == COT_TARGET].iterrows():
        for _, cod in plain[plain["target_role"] == COD_TARGET].iterrows():
            x, y = contrast.of(cot), contrast.of(cod)
            t = contrast(x, y, "output_tokens", "ratio")
            d = contrast(x, y, "accuracy", "difference")
            evidence = f"tokens x{_ci(t, 2)}; accuracy {_ci(d, signed=True)}"
            verdict = _judge(t[2] < 1 and d[1] >= -MINIMAL_LOSS, t[1] > 1 or d[2] < -MINIMAL_LOSS)
            out.append((f"{cod['variant']} vs {cot['variant']}", evidence, verdict))
    return out


def judge(
    requests: pd.DataFrame, table: pd.DataFrame, n_boot: int = bootstrap.N_BOOT, seed: int = 0
) -> list[Verdict]:
    """Every comparison the loaded runs allow, per sweep and dataset."""
    if table.empty:
        return []
    contrast = _Contrasts(requests, n_boot, seed)
    verdicts = []
    heads = aggregate.headline(table)
    for (sweep, dataset), rows in heads.groupby(["sweep_id", "dataset"], sort=False):
        found = {
            1: _fine_tuning(rows, contrast),
            2: _speculation(rows, contrast),
            3: _chain_of_draft(rows, contrast),
        }
        for h, items in found.items():
            verdicts += [Verdict(h, sweep, dataset, *item) for item in items]
    return sorted(verdicts, key=lambda v: v.hypothesis)
