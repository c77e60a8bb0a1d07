"""Pretraining set of the tiny world's base models (trained from scratch).

Two kinds of plain-text prompt-completion rows (loss on the completion only): textbook
pages (a question, a blank line, its worked solution in full (CoT) or terse (CoD); no chat
markup) and direct chats (the chat-rendered ``direct`` prompt, then ``#### <answer>``).
No bare arithmetic drills or facts. Why, and what was measured: docs/TINY_WORLD.md.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness.data.problems import Problem
from harness.data.prompts import build_messages
from train.teachers.synthetic import solutions


def direct_row(problem: Problem, prompts: Mapping[str, str], tokenizer) -> dict[str, str]:
    """The ``direct`` chat of ``problem`` as text: prompt, then ``#### <answer>``."""
    prompt = tokenizer.apply_chat_template(
        build_messages(problem, "direct", prompts), tokenize=False, add_generation_prompt=True
    )
    return {"prompt": prompt, "completion": f"#### {problem.gold_answer}"}


def textbook_row(problem: Problem, style: str) -> dict[str, str]:
    """A worked solution (``cot`` or terse ``cod``) as plain text after the question."""
    cot, cod = solutions(problem)
    return {"prompt": f"{problem.question}\n\n", "completion": cot if style == "cot" else cod}


def pretrain_rows(
    chats: Sequence[Problem],
    pages: Mapping[str, Sequence[Problem]],
    prompts: Mapping[str, str],
    tokenizer,
    seed: int,
) -> list[dict[str, str]]:
    """Direct chats of ``chats`` and textbook pages (``{style: problems}``), shuffled."""
    rows = [direct_row(p, prompts, tokenizer) for p in chats]
    rows += [textbook_row(p, style) for style, problems in pages.items() for p in problems]
    random.Random(seed).shuffle(rows)
    return rows
