"""Pretraining set of the tiny world's base models (trained from scratch).

A base model stands in for an instruction-tuned LM: it has read worked solutions (as a
pretrained LM has read textbooks) and, when chatting, was tuned to answer the ``direct``
system prompt with the bare answer. Two kinds of rows, both plain-text prompt-completion
(loss on the completion only):

- textbook pages: the question, a blank line, then its worked solution, in full (CoT)
  or terse (CoD: the bare equations); no chat markup, no system prompt, so the model
  never learns to reason inside a chat. Without terse pages a LoRA of a few hundred
  steps cannot teach the CoD target to find each operand in the question (it copies
  from its own restated sentence in CoT);
- direct chats: the chat-rendered ``direct`` prompt, then ``#### <answer>``.

Measured on 2 CPU cores (batches of 16, 2,000 steps on 12,000 easy worked solutions,
greedy, held-out problems): a 2-layer 256-wide model (2.3M parameters) got 33% right, a
4-layer 192-wide one (2.6M, same speed) 68%: depth, not width, buys arithmetic. Before
~1,000 steps a model invents the names and numbers it should copy from the question,
and rows without a worked solution delay copying: with half the rows bare arithmetic
drills or facts it still invented them after 2,000 steps (2-3% right), so there are
none. Terse pages did the same to the 2-layer model (6%); the 4-layer one still learnt
to copy with them. On 100 held-out easy problems this base got 56% right as a page and
16% in a ``direct`` chat; its CoT LoRA (chat) 42% at learning rate 3e-3 and rank 64,
58-61% at 1e-3 (rank 16 or 64) or 3e-4: a strong adapter unlearns arithmetic.

That 4 x 192 base took 17 minutes for 2,600 steps. A 4 x 128 one (1.2M) trains 1.75x
faster (8,200 vs 4,600 tokens/s; batch size and bf16 autocast changed nothing): with the
same schedule its CoT LoRA got 38% of 200 held-out easy problems on the old curriculum
and 60% once every level shared operands 1-9 (see :mod:`harness.synth`). Drafts: a
4 x 64 draft accepted less than the 2 x 128 one (0.57-0.69 vs 0.67-0.84 at K=3), and
distilling 3,234 answers instead of 900 for the same 300 steps lowered acceptance too
(0.63-0.83): the drafts are underfit, not short of data.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness.problems import Problem
from harness.prompts import build_messages
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
