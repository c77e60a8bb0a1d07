"""The exact teacher of the synthetic tiny world: :func:`harness.synth.solutions`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness import synth
from harness.problems import Problem
from train.teachers.base import Reply, Teacher


class SyntheticTeacher(Teacher):
    """Returns the programmatic CoT and CoD of synthetic problems (offline, instant)."""

    name = "synthetic"
    model = "harness.synth.solutions"

    def write_cot(self, problems: Sequence[Problem]) -> dict[str, Reply]:
        return {p.id: Reply(p.id, synth.solutions(p)[0], "stop") for p in problems}

    def write_cod(self, problems: Sequence[Problem], cots: Mapping[str, str]) -> dict[str, Reply]:
        return {p.id: Reply(p.id, synth.solutions(p)[1], "stop") for p in problems}
