"""Chat messages for a problem: the one place prompts are assembled.

The system prompt per style comes from config (``prompts.<style>``); training data and
the benchmark both build messages here, so a model is evaluated on the format it learnt.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.problems import Problem


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
