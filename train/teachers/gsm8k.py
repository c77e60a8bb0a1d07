"""The offline teacher of real GSM8K: :func:`solutions`, from a train row's own solution.

A GSM8K solution is a chain of thought already, and each arithmetic step carries a
calculator annotation (``48/2 = <<48/2=24>>24``). The CoT is the solution's lines with the
annotations removed, numbered, then ``#### <answer>``; the CoD is the annotated equations
alone, one per line (``48/2 = 24``), then the same answer line. The pipeline's validator
keeps a CoD only within the configured bounds (3-5 steps in the study). MATH solutions
carry no annotations: this teacher solves GSM8K only (the data config checks it).
"""

from __future__ import annotations

from harness.data.problems import Problem
from train.formats import ANSWER_MARK, CALCULATOR_TAG
from train.teachers.base import SolutionTeacher


def equation(annotation: str) -> str:
    """A calculator annotation as a CoD step: ``48/2=24`` -> ``48/2 = 24``."""
    left, _, right = annotation.rpartition("=")
    if not left:
        return "".join(annotation.split())
    return f"{''.join(left.split())} = {''.join(right.split())}"


def solutions(problem: Problem) -> tuple[str, str]:
    """The (CoT, CoD) derived from a GSM8K problem's gold solution."""
    body, mark, _ = problem.gold_solution.rpartition(ANSWER_MARK)
    if not mark:
        raise ValueError(f"problem {problem.id}: not a GSM8K solution (no {ANSWER_MARK} line)")
    lines = (" ".join(CALCULATOR_TAG.sub("", line).split()) for line in body.splitlines())
    answer = f"{ANSWER_MARK} {problem.gold_answer}"
    cot = [f"{i}. {line}" for i, line in enumerate(filter(None, lines), 1)]
    cod = [equation(tag) for tag in CALCULATOR_TAG.findall(body)]
    return "\n".join([*cot, answer]), "\n".join([*cod, answer])


class Gsm8kTeacher(SolutionTeacher):
    """CoT and CoD of GSM8K train problems from their annotated solutions (offline, instant)."""

    name = "gsm8k"
    model = "train.teachers.gsm8k.solutions"

    def solve(self, problem: Problem) -> tuple[str, str]:
        return solutions(problem)
