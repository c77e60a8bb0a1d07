"""Pretraining sets of the tiny world's base models (trained from scratch).

The base models stand in for an instruction-tuned LM that has never seen a worked
solution: they language-model chats in which the ``direct`` system prompt gets the bare
answer (``#### 17``), plus plain arithmetic facts in the number ranges of the synthetic
problems (a pretrained LM knows that 12 + 5 = 17, but not how to chain steps).
Everything is rendered to plain text with the tokenizer's chat template.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness import synth
from harness.problems import Problem
from harness.prompts import build_messages

FACTS_PER_DOC = 8


def direct_messages(problem: Problem, prompts: Mapping[str, str]) -> list[dict[str, str]]:
    """The ``direct`` chat of ``problem``: system + question, then ``#### <answer>``."""
    return [
        *build_messages(problem, "direct", prompts),
        {"role": "assistant", "content": f"#### {problem.gold_answer}"},
    ]


def arithmetic_docs(n: int, seed: int) -> list[str]:
    """``n`` documents of arithmetic facts, spaced (``12 + 5 = 17``) and tight (``12+5=17``)."""
    rng = random.Random(f"arithmetic:{seed}")
    levels = list(synth.LEVELS.values())
    docs = []
    for _ in range(n):
        level = rng.choice(levels)
        sep = rng.choice((" ", ""))
        lines = []
        for _ in range(FACTS_PER_DOC):
            value = rng.randint(0, level.max_value)
            op, operand = synth.pick_op(rng, level, value)
            result = synth.apply_op(op, value, operand)
            lines.append(f"{value}{sep}{synth.SYMBOL[op]}{sep}{operand}{sep}={sep}{result}")
        docs.append("\n".join(lines))
    return docs


def pretrain_texts(
    problems: Sequence[Problem], prompts: Mapping[str, str], tokenizer, n_arithmetic: int, seed: int
) -> list[dict[str, str]]:
    """Language-modelling rows (``{"text": ...}``): direct chats and arithmetic documents."""
    chats = [
        tokenizer.apply_chat_template(direct_messages(p, prompts), tokenize=False).rstrip("\n")
        for p in problems
    ]
    rows = [{"text": t} for t in [*chats, *arithmetic_docs(n_arithmetic, seed)]]
    random.Random(seed).shuffle(rows)
    return rows
