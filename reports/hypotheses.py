"""The seed study's three hypotheses, each judged on measured contrasts with 95% CIs.

The judging rules are :data:`RULES` (printed in the report). Targets are told apart by
their role in the config (``target_role``: base, cot, cod), not by model path.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from reports import aggregate, bootstrap, sentinel

BASE_TARGET, COT_TARGET, COD_TARGET = "base", "cot", "cod"  # target roles of the seed study
MINIMAL_LOSS = 0.05  # "minimal accuracy loss": at most 5 percentage points
HYPOTHESES = {
    1: "Reasoning fine-tuning improves accuracy",
    2: "Speculative decoding cuts latency without accuracy loss",
    3: "CoD cuts tokens with minimal accuracy loss",
}
RATIO = {r.name: r for r in aggregate.RATIOS}
NO_EFFECT = "no detectable effect"  # a speedup whose widened interval includes 1
UNTESTABLE = "untestable"  # the inputs cannot carry the comparison (RULES, "Untestable")
MAX_CUT = 0.2  # a side with a larger share of answers cut at the token limit is not compared
RULES = f"""\
Each comparison is a paired bootstrap over the problems both sides answered (and their
engine instances; where both sides share pairing windows of several requests, each end
the wider of that and the cluster jackknife over the windows), on the headline rows
(lowest concurrency; K = 0, or a draft variant's best K).

1. Fine-tuning: each fine-tuned target (no draft) vs the base target. Supported when
   the CI of accuracy(fine-tuned) - accuracy(base) is above 0, refuted when below 0.
2. Speculation: each draft variant vs its own target at K = 0 (its interleaved pairs,
   or the K = 0 run when sequential). Against the winner's curse, the best K is chosen on
   one half of the problems (split by a hash of the problem id) and judged on the other
   half only. The held-out TPOT speedup's CI is widened by the noise the runs measured
   (the speedup's min and max over its median across repeats; |A/A - 1| of the target's
   interleaved K = 0 row; the drift sentinel's move within a run, when it exceeds
   {sentinel.DRIFT_INTERLEAVED:.0%} (interleaved) or {sentinel.DRIFT:.0%} (sequential), of the
   row's runs or, sequential, its K = 0 runs'). Supported when the widened interval is
   above 1 and the accuracy difference's CI is not below 0; refuted when the widened
   interval is below 1 or the accuracy difference's CI is below 0; "no detectable effect"
   when it includes 1.
3. Chain of Draft: the CoD target vs the CoT target (no draft). Supported when the CI of
   tokens(CoD) / tokens(CoT) is below 1 and the accuracy difference's CI stays above
   -{MINIMAL_LOSS} ("minimal loss"); refuted when the token ratio's CI is above 1 or the
   accuracy difference's CI is below -{MINIMAL_LOSS}.

Untestable: the inputs cannot carry the comparison; the evidence says why.
- Accuracy (hypotheses 1 and 3, and 2's accuracy side) is not compared when it is 0 on
  both sides or 1 on both, over the problems both answered: no room to differ. A
  speculator whose outputs equal its baseline's on every problem (lossless, greedy) loses
  no accuracy by identity, so its speedup is judged whatever the accuracy.
- Neither accuracy nor tokens (hypothesis 3) is compared when more than {MAX_CUT:.0%} of
  either side's answers were cut at the token limit (finish reason "length"): a cut answer
  is graded and counted on the text the limit ended, and past one in five the limit, not
  the model, sets the side's accuracy and length. Runs recorded without a finish reason
  are not judged cut.
- An interleaved speedup without its target's A/A row (K = 0, interleaved) in the same
  sweep and dataset has no noise floor and is not judged: "no A/A in this sweep".
  Sequential rows have no A/A by design; they are judged without that floor, and their
  evidence says so.

A refutation that a comparable side carries stands; otherwise a comparison with a side
that cannot be compared is untestable, whatever its intervals say.

Anything else is inconclusive; "mixed" means the comparisons the data can carry disagree."""


@dataclass(frozen=True)
class Verdict:
    """One measured comparison for one hypothesis."""

    hypothesis: int
    sweep_id: str
    dataset: str
    comparison: str
    evidence: str
    verdict: str  # supported | refuted | inconclusive | no detectable effect | untestable

    def to_row(self) -> dict[str, object]:
        """Flat dict for the verdict table."""
        return asdict(self)


def _ci(x: tuple[float, float, float], digits: int = 3, signed: bool = False) -> str:
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    return f"{f.format(x[0])} [{f.format(x[1])}, {f.format(x[2])}]"


def _judge(support: bool, refute: bool, untestable: str = "") -> str:
    """``refute`` holds only the refutations of sides the data can carry; ``untestable``
    says why a side cannot be compared ("" when every side can)."""
    return (
        "refuted" if refute else UNTESTABLE if untestable else
        "supported" if support else "inconclusive"
    )  # fmt: skip


def _shared(x: pd.DataFrame, y: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The answered requests of both sides on the problems both answered."""
    x, y = aggregate.answered(x), aggregate.answered(y)
    both = np.intersect1d(x["problem_id"], y["problem_id"])
    return x[x["problem_id"].isin(both)], y[y["problem_id"].isin(both)]


def _flat(x: pd.DataFrame, y: pd.DataFrame) -> str:
    """Why the accuracy of ``x`` and ``y`` cannot differ: 0 on both, or 1 on both ("" else)."""
    acc = {float(s["correct"].astype(float).mean()) for s in _shared(x, y)}
    if len(acc) == 1 and acc <= {0.0, 1.0}:
        return f"accuracy {acc.pop():.0f} on both sides (no room to differ)"
    return ""


def _cut(sides: dict[str, pd.DataFrame]) -> str:
    """Which of two named request sets had more than :data:`MAX_CUT` of the answers of
    their shared problems cut at the token limit ("" if neither; requests without a
    finish reason, recorded before it was, are not judged)."""
    out = []
    for name, side in zip(sides, _shared(*sides.values()), strict=True):
        finish = side.get("finish_reason", pd.Series(dtype=object))
        share = (finish == "length").sum() / max(finish.notna().sum(), 1)
        if share > MAX_CUT:
            out.append(f"{share:.0%} of {name} answers cut at the token limit")
    return "; ".join(out)


def _identical(x: pd.DataFrame, y: pd.DataFrame) -> bool:
    """True when every problem both answered got the same output tokens on both sides (a
    lossless speculator at temperature 0): its accuracy cannot differ, whatever it is."""
    x, y = (aggregate.answered(s)[["problem_id", "output_hash"]] for s in (x, y))
    both = x.merge(y, on="problem_id", suffixes=("", "_y"))
    return bool(len(both)) and bool((both["output_hash"] == both["output_hash_y"]).all())


def _why(*reasons: str) -> str:
    return "; ".join(r for r in reasons if r)


def _untestable(why: str) -> str:
    return f"; untestable: {why}" if why else ""


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
            x, y = contrast.of(b), contrast.of(v)
            d = contrast(x, y, "accuracy", "difference")
            why = _why(_flat(x, y), _cut({b["variant"]: x, v["variant"]: y}))
            evidence = f"accuracy {v['accuracy']:.3f} vs {b['accuracy']:.3f}: {_ci(d, signed=True)}"
            verdict = _judge(d[1] > 0, not why and d[2] < 0, why)
            out.append((f"{v['variant']} vs {b['variant']}", evidence + _untestable(why), verdict))
    return out


def half(problem_ids: pd.Series) -> np.ndarray:
    """0 or 1 per problem, from a hash of its id: the choosing and the held-out half."""
    return np.array([zlib.crc32(str(p).encode()) % 2 for p in problem_ids], dtype=int)


def _a_a(table: pd.DataFrame, row: pd.Series) -> float:
    """The A/A speedup of ``row``'s target: the TPOT speedup of the interleaved K = 0 row
    of its baseline in ``table`` (NaN when there is none)."""
    aa = aggregate.select(table, row, aggregate.BASELINE)
    aa = aa[(aa["k"] == 0) & (aa["pairing"] == "interleaved")]["speedup_tpot"].dropna()
    return float(aa.iloc[0]) if len(aa) else np.nan


def noise_floor(table: pd.DataFrame, row: pd.Series) -> tuple[float, float, str]:
    """Factors (low, high) that widen ``row``'s speedup interval by the noise the runs
    measured, and what they came from: the spread of its speedup across repeats (min and
    max over the median); when interleaved, the A/A check of its target (the K = 0 row of
    the same baseline: |A/A - 1| either way); and a drift sentinel that flagged the row's
    runs (or, sequential, its K = 0 baseline's: their timings enter the ratio), by the
    largest such move, |end / start - 1|, either way."""
    low, high, said = 1.0, 1.0, []
    if row.get("n_repeats", 1) > 1 and row.get("speedup_tpot_repeat_median", 0) > 0:
        mid = row["speedup_tpot_repeat_median"]
        low, high = row["speedup_tpot_repeat_min"] / mid, row["speedup_tpot_repeat_max"] / mid
        said.append(f"repeats {low:.2f}-{high:.2f}x")
    aa = _a_a(table, row) if row.get("pairing") == "interleaved" else np.nan
    if not np.isnan(aa):
        low, high = low / (1 + abs(aa - 1)), high * (1 + abs(aa - 1))
        said.append(f"A/A {aa:.3f}")
    drifts = [(row.get("reference_drift"), row.get("pairing"))]
    if row.get("pairing") != "interleaved" and "reference_drift" in table:
        base = aggregate.select(table, row, aggregate.BASELINE)
        base = base[base["k"] == 0]
        drifts += list(zip(base["reference_drift"], base["pairing"], strict=True))
    moved = [abs(d) for d, pairing in drifts if sentinel.is_flagged(d, pairing)]
    if moved:
        low, high = low / (1 + max(moved)), high * (1 + max(moved))
        said.append(f"sentinel drift {max(moved):.1%}")
    return low, high, ", ".join(said)


def _label(v: pd.Series, k: int) -> str:
    return f"{v['variant']} (K={k}) vs {v['target_role']} target (K=0)"


def _speculation(
    rows: pd.DataFrame, table: pd.DataFrame, contrast: _Contrasts
) -> list[tuple[str, str, str]]:
    config = [c for c in aggregate.GROUP if c not in ("k", "pairing")]
    out = []
    for _, v in rows[rows["draft"] != "none"].iterrows():
        if v["pairing"] == "interleaved" and np.isnan(_a_a(table, v)):
            s = (v["speedup_tpot"], v["speedup_tpot_lo"], v["speedup_tpot_hi"])
            evidence = (f"TPOT speedup {_ci(s, 2)} (interleaved, the best K on all problems)"
                        "; untestable: no A/A in this sweep")  # fmt: skip
            out.append((_label(v, v["k"]), evidence, UNTESTABLE))
            continue
        base = contrast.of(v, aggregate.BASELINE)
        base = base[base["k"] == 0]
        ks = aggregate.select(table, v, tuple(config))
        ks = ks[(ks["k"] > 0) & (ks["pairing"] == v["pairing"])].sort_values("k")
        if base.empty or ks.empty:
            continue
        sides = [base[half(base["problem_id"]) == h] for h in (0, 1)]
        split = all(len(set(s["problem_id"])) for s in sides)
        choose, test = sides if split else (base, base)

        def baseline(y: pd.DataFrame, side: pd.DataFrame, paired: bool) -> pd.DataFrame:
            mine = aggregate.pair_side(y) if paired else side
            return mine[mine["problem_id"].isin(side["problem_id"])]

        chosen = {}
        for _, r in ks.iterrows():
            y, paired = contrast.of(r), r["pairing"] == "interleaved"
            chosen[int(r["k"])] = contrast(y, baseline(y, choose, paired), "tpot_s", "ratio")[0]
        k = max(chosen, key=lambda x: -np.inf if np.isnan(chosen[x]) else chosen[x])
        row = ks[ks["k"] == k].iloc[0]
        y, paired = contrast.of(row), row["pairing"] == "interleaved"
        y = y[y["problem_id"].isin(test["problem_id"])]
        s = contrast(y, baseline(y, test, paired), "tpot_s", "ratio")
        d = contrast(test, y, "accuracy", "difference")
        low, high, noise = noise_floor(table, row)
        wide = (s[0], s[1] * low, s[2] * high)
        tried = ", ".join(f"K={x}: {chosen[x]:.2f}" for x in chosen)
        where = "held-out half" if split else "same problems (too few to split)"
        pairing = "interleaved" if paired else f"{row['pairing']}: no A/A floor"
        evidence = (f"best K={k} on the choosing half ({tried}); on the {where}: TPOT "
                    f"speedup {_ci(s, 2)} ({pairing}")  # fmt: skip
        evidence += f"; widened by {noise}: [{wide[1]:.2f}, {wide[2]:.2f}])" if noise else ")"
        if _identical(y, baseline(y, test, paired)):  # greedy and lossless: no loss possible
            why = ""
            evidence += f", accuracy {_ci(d, signed=True)}; outputs identical to K=0's"
        else:
            why = _why(_flat(test, y), _cut({"K=0": test, f"K={k}": y}))
            evidence += f", accuracy {_ci(d, signed=True)}" + _untestable(why)
        if not chosen[k] > 1:
            evidence = "no K beats K=0: " + evidence
        if (not why and d[2] < 0) or wide[2] < 1:
            verdict = "refuted"
        elif why:
            verdict = UNTESTABLE
        elif wide[1] <= 1:
            verdict = NO_EFFECT
        else:
            verdict = "supported" if d[2] >= 0 else "inconclusive"
        out.append((_label(v, k), evidence, verdict))
    return out


def _chain_of_draft(rows: pd.DataFrame, contrast: _Contrasts) -> list[tuple[str, str, str]]:
    plain = rows[rows["draft"] == "none"]
    out = []
    for _, cot in plain[plain["target_role"] == COT_TARGET].iterrows():
        for _, cod in plain[plain["target_role"] == COD_TARGET].iterrows():
            x, y = contrast.of(cot), contrast.of(cod)
            t = contrast(x, y, "output_tokens", "ratio")
            d = contrast(x, y, "accuracy", "difference")
            capped = _cut({cot["variant"]: x, cod["variant"]: y})
            why = _why(_flat(x, y), capped)
            evidence = f"tokens x{_ci(t, 2)}; accuracy {_ci(d, signed=True)}" + _untestable(why)
            refute = (not capped and t[1] > 1) or (not why and d[2] < -MINIMAL_LOSS)
            verdict = _judge(t[2] < 1 and d[1] >= -MINIMAL_LOSS, refute, why)
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
            2: _speculation(
                rows, table[(table["sweep_id"] == sweep) & (table["dataset"] == dataset)], contrast
            ),
            3: _chain_of_draft(rows, contrast),
        }
        for h, items in found.items():
            verdicts += [Verdict(h, sweep, dataset, *item) for item in items]
    return sorted(verdicts, key=lambda v: v.hypothesis)
