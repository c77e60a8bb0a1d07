"""Format validators for teacher outputs: Chain of Draft (the study's definition) and CoT.

A CoD is a few short steps then ``#### <answer>`` as the last line; the study's bounds are
3-5 steps of at most 5 words (Xu et al. 2025, "Chain of Draft"). A step is one non-empty
line; a leading list marker ("1.", "2)", "Step 3:", "-") is not a word. A CoT is plain
numbered steps, no GSM8K calculator tags (``<<2*3=6>>``), and the same final line.

Both validators return a :class:`Verdict` whose ``reason`` names the first rule broken, so
one function serves filtering (``ok``) and reporting (compliance rate, reasons).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANSWER_MARK = "####"
_LIST_MARKER = re.compile(r"^(?:step\s*\d+\s*[.):]|\d+\s*[.):]|[-*•])\s*", re.IGNORECASE)
CALCULATOR_TAG = re.compile(r"<<([^>]*)>>")  # GSM8K's <<48/2=24>>


@dataclass
class CodBounds:
    """How many steps a CoD may have and how many words each step may hold.

    Also the ``cod`` section of the data config (``conf/data/common.yaml``); not frozen,
    since Hydra merges the YAML values into it.
    """

    min_steps: int = 3
    max_steps: int = 5
    max_words: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"cod bounds min_steps={self.min_steps}, max_steps={self.max_steps}: need 1 <= min <= max"
            )
        if self.max_words < 1:
            raise ValueError(f"cod bounds max_words={self.max_words}: must be >= 1")


@dataclass(frozen=True)
class Verdict:
    """Whether a text follows its format, and if not the first rule it breaks."""

    ok: bool
    reason: str  # "ok" or the broken rule
    steps: int  # step lines before the answer line
    longest_step: int  # words in the longest step
    answer: str | None  # text after the final ``####``


def split_steps(text: str) -> tuple[list[str], str | None, bool]:
    """(steps without list markers, final answer, whether text follows the answer line).

    The answer line is the last line that starts with ``####``; ``None`` when there is none.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    marks = [i for i, line in enumerate(lines) if line.startswith(ANSWER_MARK)]
    if not marks:
        return [_LIST_MARKER.sub("", line) for line in lines], None, False
    last = marks[-1]
    steps = [_LIST_MARKER.sub("", line) for line in lines[:last]]
    return steps, lines[last][len(ANSWER_MARK) :].strip(), last != len(lines) - 1


def _answer_rule(text: str) -> tuple[str | None, list[str], str | None]:
    """The broken answer rule (or None), the steps and the answer."""
    if not text.strip():
        return "empty", [], None
    steps, answer, trailing = split_steps(text)
    if answer is None:
        return "no_final_answer", steps, None
    if not answer:
        return "empty_answer", steps, answer
    if trailing:
        return "text_after_answer", steps, answer
    return None, steps, answer


def _longest(steps: list[str]) -> int:
    return max((len(step.split()) for step in steps), default=0)


def check_cod(text: str, bounds: CodBounds) -> Verdict:
    """Check a Chain of Draft: final answer line, step count and words per step."""
    reason, steps, answer = _answer_rule(text)
    if reason is None:
        if len(steps) < bounds.min_steps:
            reason = "too_few_steps"
        elif len(steps) > bounds.max_steps:
            reason = "too_many_steps"
        elif _longest(steps) > bounds.max_words:
            reason = "step_too_long"
    return Verdict(reason is None, reason or "ok", len(steps), _longest(steps), answer)


def check_cot(text: str) -> Verdict:
    """Check a Chain of Thought: at least one step, no calculator tags, final answer line."""
    reason, steps, answer = _answer_rule(text)
    if reason is None:
        if not steps:
            reason = "no_steps"
        elif CALCULATOR_TAG.search(text):
            reason = "calculator_tags"
    return Verdict(reason is None, reason or "ok", len(steps), _longest(steps), answer)
