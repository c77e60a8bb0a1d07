"""Chat messages for a problem: the one place prompts are assembled.

The system prompt per style comes from config (``prompts.<style>``); training data and
the benchmark both build messages here, so a model is evaluated on the format it learnt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.data.problems import Problem


def build_messages(
    problem: Problem, style: str, prompts: Mapping[str, str]
) -> list[dict[str, str]]:
    """System instruction for ``style`` followed by the question as the user turn."""
    if style not in prompts:
        raise KeyError(f"prompt style {style!r} has no system prompt; known: {sorted(prompts)}")
    return [
        {"role": "system", "content": prompts[style]},
        {"role": "user", "content": problem.question},
    ]


def prompt_token_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids the engine is sent for ``messages``: the chat template's text, tokenised.

    The template already holds any special tokens, so none are added again.
    """
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
