"""The Problem record: one evaluation or training question with its gold answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A question with its gold final answer and gold worked solution.

    ``difficulty`` is one of ``easy``, ``medium``, ``hard``; ``answer_style`` tells the
    grader how to compare answers (``number`` for GSM8K-like data, ``math`` for MATH).
    """

    id: str
    dataset: str
    difficulty: str
    question: str
    gold_answer: str
    gold_solution: str
    answer_style: str = "number"
