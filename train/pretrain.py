"""Pretraining sets of the tiny world's base models (trained from scratch).

The base models stand in for an instruction-tuned LM that has never seen a worked
solution. They language-model three kinds of text: chats in which the ``direct`` system
prompt gets the bare answer (``#### 17``); arithmetic facts in the number ranges of the
synthetic problems (a pretrained LM knows that 12 + 5 = 17); and copy documents, a
random run of words and numbers followed by the same run (a pretrained LM can repeat
what it read: without this, a few-million-parameter model trained for minutes never
learns to look a number up in the question). None shows how to chain steps.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness import synth
from harness.datasets import select
from harness.problems import Problem
from harness.prompts import build_messages

FACTS_PER_DOC = 8
COPY_WORDS = (3, 8)  # words per copied run


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


def copy_docs(n: int, problems: Sequence[Problem], seed: int) -> list[str]:
    """``n`` documents: a random run of words and numbers, a blank line, the same run again."""
    rng = random.Random(f"copy:{seed}")
    words = sorted({w for p in problems for w in p.question.split()})
    docs = []
    for _ in range(n):
        run = " ".join(
            str(rng.randint(0, 199)) if rng.random() < 0.4 else rng.choice(words)
            for _ in range(rng.randint(*COPY_WORDS))
        )
        docs.append(f"{run}\n\n{run}")
    return docs


def solution_docs(problems: Sequence[Problem]) -> list[str]:
    """Plain-text worked solutions ("textbook" pages): the question, a blank line, the CoT."""
    return [f"{p.question}\n\n{p.gold_solution}" for p in problems]


def pretrain_texts(
    problems: Sequence[Problem],
    prompts: Mapping[str, str],
    tokenizer,
    n_arithmetic: int,
    n_copy: int,
    n_solutions: int,
    seed: int,
) -> list[dict[str, str]]:
    """Language-modelling rows (``{"text": ...}``): direct chats, arithmetic, copy, solutions."""
    chats = [
        tokenizer.apply_chat_template(direct_messages(p, prompts), tokenize=False).rstrip("\n")
        for p in problems
    ]
    texts = [
        *chats,
        *arithmetic_docs(n_arithmetic, seed),
        *copy_docs(n_copy, problems, seed),
        *solution_docs(select(list(problems), n_solutions) if n_solutions else []),
    ]
    rows = [{"text": t} for t in texts]
    random.Random(seed).shuffle(rows)
    return rows
