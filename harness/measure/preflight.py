"""Pre-flight acceptance: what a greedy draft will accept, from a K = 0 run's own outputs.

    python -m harness.measure.preflight RUN_DIR [RUN_DIR ...] --draft DIR [--ks 1,3,5]

The draft (or EAGLE-3 head) reads each request's prompt + output teacher-forced;
:func:`greedy_steps` replays vLLM's steps over its agreement with the target, and
:func:`continuation` extends the output past its end. Written to ``RUN_DIR/preflight.json``
under the draft's name as given (use the sweep config's name, so the report can pair it
with the K > 0 runs). Agreement and the replay: docs/METRICS.md, docs/COST_MODEL.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics
from harness.checks import command
from harness.files import write_text

PREFLIGHT = "preflight.json"


# a draft model's agreement per output position, or a head's per chain start and depth
Agreement = Sequence[bool] | Sequence[Sequence[bool]]


def agrees(agree: Agreement, start: int, depth: int) -> bool:
    """Whether the draft of depth ``depth`` of a chain starting after output token ``start``
    equals the target's token (unknown positions: no)."""
    if start >= len(agree):
        return False
    if isinstance(agree[start], Sequence):  # a head: per chain start and depth
        return depth < len(agree[start]) and bool(agree[start][depth])
    return start + depth < len(agree) and bool(agree[start + depth])


def greedy_steps(agree: Agreement, k: int, end: int | None = None) -> list[int]:
    """Accepted drafts per verify step of a greedy draft against a greedy target.

    ``agree[j]`` says whether the draft, given the prompt and output tokens 0..j, predicts
    output token j + 1 (token 0 comes from prefill); for a head ``agree[j][d]`` says it of
    output token j + 1 + d at depth d of the chain (:func:`agrees`). Each step drafts ``k`` tokens from
    the accepted prefix; the first disagreement ends it; the target adds one token (its
    correction, or the bonus token after ``k`` acceptances). Steps run until the ``end``
    decode positions (default ``len(agree)``) are produced; positions of ``agree`` past
    ``end`` (the target's continuation) count only in the step that crosses it, and
    unknown positions count as rejections.
    """
    end = len(agree) if end is None else end
    steps, pos = [], 0
    while pos < end:
        accepted = 0
        while accepted < k and agrees(agree, pos, accepted):
            accepted += 1
        steps.append(accepted)
        pos += accepted + 1
    return steps


def replay(agree: Agreement, k: int, end: int | None = None) -> metrics.SpecCounts:
    """The spec counts (steps, drafted, accepted, per position) of :func:`greedy_steps`."""
    steps = greedy_steps(agree, k, end)
    histogram = np.bincount(np.asarray(steps, dtype=np.int64), minlength=k + 1)
    return metrics.counts_from_histogram([int(n) for n in histogram], k * len(steps))


def reaches_end(agree: Agreement, k: int) -> bool:
    """Whether the last step over ``agree`` alone accepts every token left with drafts to
    spare: then its verification runs past the output's end."""
    steps = greedy_steps(agree, k)
    left = len(agree) - sum(a + 1 for a in steps[:-1])
    return bool(steps) and steps[-1] == left < k


def stored(result: dict[str, Any]) -> list[tuple[Agreement, int]]:
    """(agreement over the output and past it, decode positions) per request of a
    ``preflight.json`` entry, for :func:`greedy_steps` (a head's as per-start depth lists)."""
    beyond = result.get("beyond", {})
    vectors: list[tuple[Agreement, int]] = []
    for pid, bits in result.get("agree", {}).items():
        if isinstance(bits, str):
            vectors.append(([b == "1" for b in bits + beyond.get(pid, "")], len(bits)))
        else:  # a head's depth-major strings, already past the end where a chain reaches
            vectors.append(
                ([[c == "1" for c in row] for row in zip(*bits, strict=True)], len(bits[0]))
            )
    return vectors


def steps_per_token(result: dict[str, Any], k: int) -> list[float]:
    """Replayed verify steps per decode position of each request of a ``preflight.json``
    entry at ``k`` (their count over their sum is E for a mean TPOT)."""
    return [len(greedy_steps(a, k, end)) / end for a, end in stored(result) if end]


def continuation(model: Any, prompt: Sequence[int], output: Sequence[int], n: int) -> list[int]:
    """``model``'s next ``n`` greedy tokens after prompt + output, past any end-of-sequence."""
    import torch

    ids, tokens, past = torch.tensor([[*prompt, *output]]), [], None
    with torch.no_grad():
        for _ in range(n):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
            ids, past = torch.tensor([[tokens[-1]]]), out.past_key_values
    return tokens


def run_prompts(summary: dict[str, Any], problem_ids: Sequence[str]) -> dict[str, list[int]]:
    """The prompt token ids a run sent, rendered again from its resolved config."""
    from omegaconf import OmegaConf

    from harness.checks import load_tokenizer
    from harness.data.datasets import load_problems
    from harness.data.prompts import build_messages, prompt_token_ids

    cfg = OmegaConf.create(summary["config"])
    tokenizer = load_tokenizer(summary["target"])
    wanted = set(problem_ids)
    return {
        p.id: prompt_token_ids(tokenizer, build_messages(p, cfg.variant.prompt_style, cfg.prompts))
        for p in load_problems(cfg.dataset, cfg.limit)
        if p.id in wanted
    }


def estimate(run_dir: Path, draft: str, ks: Sequence[int]) -> dict[str, Any]:
    """Pre-flight counts of ``draft`` at each K over the K = 0 run in ``run_dir``.

    Raises:
        ConfigError: not a complete K = 0 run, its prompts cannot be rendered again, a draft
            vLLM would refuse beside the run's target (vocabulary), or one whose weights do
            not load under its config.json.
    """
    import pyarrow.parquet as pq

    from harness import provenance, results, speculators
    from harness.checks import load_causal_lm
    from harness.errors import ConfigError
    from harness.speculators.base import bits

    summary = results.read_summary(run_dir)
    if summary is None or summary.get("k") != 0:
        raise ConfigError(f"{run_dir}: not a complete K = 0 run")
    family = speculators.of_checkpoint(draft)
    family.check(summary["target"], draft)  # as the harness does before a K > 0 run
    cols = ["problem_id", "prompt_tokens", "output_token_ids"]
    requests = pq.read_table(run_dir / results.REQUESTS, columns=cols).to_pylist()
    prompts = run_prompts(summary, [r["problem_id"] for r in requests])
    model = family.replay_model(draft)
    target = cache(lambda: load_causal_lm(summary["target"], "target"))
    agree, beyond = {}, {}
    for r in requests:
        pid, output = r["problem_id"], r["output_token_ids"]
        prompt = prompts.get(pid)
        if prompt is None or len(prompt) != r["prompt_tokens"]:
            raise ConfigError(f"{run_dir}: cannot render the prompt of {pid} again")
        teacher = _Teacher(target, prompt, output, ks)
        agree[pid], past = family.replay(model, teacher, prompt, output, max(ks))
        if past:
            beyond[pid] = past
    per_k = {}
    for k in ks:
        counts = (replay([*a, *beyond.get(pid, [])], k, len(a)) for pid, a in agree.items())
        per_k[str(k)] = metrics.total_counts(counts).to_row()
    firsts = [x for a in agree.values() for x in family.firsts(a)]
    return {
        "draft_identity": provenance.model_identity(draft)["digest"],
        "agreement": sum(firsts) / max(len(firsts), 1),
        "ks": per_k,
        "agree": {pid: family.encode(a, max(ks)) for pid, a in agree.items()},
        "beyond": {pid: bits(b) for pid, b in beyond.items()},
    }


@dataclass
class _Teacher:
    """The run's target for a family's replay of one request
    (:class:`harness.speculators.base.Teacher`)."""

    model: Callable[[], Any]  # the target's causal LM, loaded once for the run
    prompt: Sequence[int]
    output: Sequence[int]
    ks: Sequence[int]

    def more(self) -> list[int]:
        return continuation(self.model(), self.prompt, self.output, max(self.ks))

    def past_end(self, agree: Sequence[bool]) -> bool:
        return any(reaches_end(agree, k) for k in self.ks)


def write(run_dir: Path, draft: str, result: dict[str, Any]) -> Path:
    """Merge ``result`` into ``run_dir/preflight.json`` under ``draft`` (written atomically)."""
    data = read(run_dir)
    data[draft] = result
    return write_text(run_dir / PREFLIGHT, json.dumps(data, indent=1))


def read(run_dir: Path) -> dict[str, Any]:
    """Draft name -> pre-flight result of a run directory (empty without one)."""
    try:
        return json.loads((run_dir / PREFLIGHT).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def parse_ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--ks={text}: give positive integers like 1,3,5")
    return ks


@command(doc=__doc__)
def main(argv: list[str]) -> int:
    """Estimate and write; print each file. Returns the exit code (2: bad input)."""
    from harness.checks import check_model_dir

    parser = argparse.ArgumentParser(prog="python -m harness.measure.preflight")
    parser.add_argument("runs", nargs="+", type=Path, help="K = 0 run directories")
    parser.add_argument("--draft", required=True, help="the draft model, named as in the sweep")
    parser.add_argument(
        "--ks", type=parse_ks, default=[1, 3, 5], help="Ks to replay (default 1,3,5)"
    )
    args = parser.parse_args(argv)
    check_model_dir("--draft", args.draft)
    for run_dir in args.runs:
        result = estimate(run_dir, args.draft, args.ks)
        rates = ", ".join(f"K={k} {v['acceptance_rate']:.3f}" for k, v in result["ks"].items())
        print(f"{write(run_dir, args.draft, result)}: acceptance {rates}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
