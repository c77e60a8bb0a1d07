"""The exact teacher of the synthetic tiny world: :func:`solutions`.

A synthetic problem (:mod:`harness.data.synth`) carries its exact CoT as gold solution; the CoD
keeps only its equations, one per line (``12 + 5 = 17``: five words; at most five
operations, so at most five lines), then ``#### <answer>``.
"""

from __future__ import annotations

import re

from harness.data.problems import Problem
from train.teachers.base import SolutionTeacher

_EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")


def solutions(problem: Problem) -> tuple[str, str]:
    """The exact (CoT, CoD) solutions of a synthetic problem."""
    steps = _EQUATION.findall(problem.gold_solution)
    if not steps:
        raise ValueError(f"problem {problem.id}: not a synthetic problem (no equations)")
    cod = "\n".join(
        [*(f"{a} {op} {b} = {r}" for a, op, b, r in steps), f"#### {problem.gold_answer}"]
    )
    return problem.gold_solution, cod


class SyntheticTeacher(SolutionTeacher):
    """Returns the programmatic CoT and CoD of synthetic problems (offline, instant)."""

    name = "synthetic"
    model = "train.teachers.synthetic.solutions"

    def solve(self, problem: Problem) -> tuple[str, str]:
        return solutions(problem)
