"""Pretraining set of the tiny world's base models (trained from scratch).

A base model stands in for an instruction-tuned LM: it has read worked solutions (as a
pretrained LM has read textbooks) and, when chatting, was tuned to answer the ``direct``
system prompt with the bare answer. Two kinds of rows, both plain-text prompt-completion
(loss on the completion only):

- textbook pages: the question, a blank line, then its worked solution (no chat markup,
  no system prompt, so it never learns to reason inside a chat);
- direct chats: the chat-rendered ``direct`` prompt, then ``#### <answer>``.

Measured on 2 CPU cores (2.3M-parameter target, batches of 16, 4-5 steps/s): a model
learns to copy names and numbers from the question only after ~1,000-2,000 steps; before
that it invents them. Anything that takes steps away from worked solutions delays that:
with half the rows bare arithmetic drills, or with terse (CoD) pages beside the CoT ones,
it still invented them after 2,000 steps. What it learns last is arithmetic: a model
that copies well still writes 7 - 6 = 3.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness.problems import Problem
from harness.prompts import build_messages


def direct_row(problem: Problem, prompts: Mapping[str, str], tokenizer) -> dict[str, str]:
    """The ``direct`` chat of ``problem`` as text: prompt, then ``#### <answer>``."""
    prompt = tokenizer.apply_chat_template(
        build_messages(problem, "direct", prompts), tokenize=False, add_generation_prompt=True
    )
    return {"prompt": prompt, "completion": f"#### {problem.gold_answer}"}


def textbook_row(problem: Problem) -> dict[str, str]:
    """A worked solution as plain text: the question, a blank line, the solution."""
    return {"prompt": f"{problem.question}\n\n", "completion": problem.gold_solution}


def pretrain_rows(
    chats: Sequence[Problem],
    pages: Sequence[Problem],
    prompts: Mapping[str, str],
    tokenizer,
    seed: int,
) -> list[dict[str, str]]:
    """Direct chats of ``chats`` and textbook pages of ``pages``, shuffled."""
    rows = [direct_row(p, prompts, tokenizer) for p in chats]
    rows += [textbook_row(p) for p in pages]
    random.Random(seed).shuffle(rows)
    return rows
