"""The teacher interface: a CoT for every problem, then a CoD compressed from each CoT.

A teacher answers by problem id with :class:`Reply` records; it never filters (cleaning
is the pipeline's job, so every drop is counted in one place). LLM teachers share
:class:`PromptedTeacher`: the prompt templates come from config (``prompts.*`` in
``conf/data/common.yaml``) and one :meth:`PromptedTeacher.complete` call runs a stage.
Teachers without a model (synthetic, GSM8K) derive both texts from the gold solution:
:class:`SolutionTeacher`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from string import Template

from harness.data.problems import Problem
from harness.files import json_digest
from train.formats import CodBounds


@dataclass(frozen=True)
class Reply:
    """A teacher's answer to one request; ``text`` is None when there is no usable text."""

    key: str
    text: str | None
    finish_reason: str  # stop | length | blocked | error
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    def to_row(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TeacherRequest:
    """One chat request: a system instruction and a user turn, answered under ``key``."""

    key: str
    system: str
    user: str

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class TeacherPrompts:
    """``string.Template`` texts (``$name`` placeholders; ``$$`` is a literal dollar).

    CoT templates see ``$question $solution $answer``; CoD templates also see ``$cot``
    and the bounds ``$min_steps $max_steps $max_words``.
    """

    cot_system: str
    cot_user: str
    cod_system: str
    cod_user: str

    def __post_init__(self) -> None:
        sample = _fields(Problem("id", "d", "easy", "q", "1", "s"), CodBounds(), cot="c")
        for name, text in asdict(self).items():
            try:
                Template(text).substitute(sample)
            except (KeyError, ValueError) as exc:
                known = " ".join(f"${key}" for key in sample)
                raise ValueError(f"prompts.{name}: bad placeholder {exc}; known: {known}") from None

    def cot_request(self, problem: Problem) -> TeacherRequest:
        fields = _fields(problem)
        return TeacherRequest(
            problem.id, _fill(self.cot_system, fields), _fill(self.cot_user, fields)
        )

    def cod_request(self, problem: Problem, cot: str, bounds: CodBounds) -> TeacherRequest:
        fields = _fields(problem, bounds, cot)
        return TeacherRequest(
            problem.id, _fill(self.cod_system, fields), _fill(self.cod_user, fields)
        )

    def digest(self) -> str:
        """Short hash of the templates (recorded in manifests and checkpoints)."""
        return json_digest(asdict(self))


def _fields(
    problem: Problem, bounds: CodBounds | None = None, cot: str | None = None
) -> dict[str, str]:
    fields = {
        "question": problem.question,
        "solution": problem.gold_solution,
        "answer": problem.gold_answer,
    }
    if bounds is not None:
        fields |= {k: str(v) for k, v in asdict(bounds).items()}
    if cot is not None:
        fields["cot"] = cot
    return fields


def _fill(template: str, fields: Mapping[str, str]) -> str:
    return Template(template).substitute(fields)


class Teacher(ABC):
    """Writes CoT solutions and CoD summaries, answering by problem id."""

    name: str
    model: str

    @abstractmethod
    def write_cot(self, problems: Sequence[Problem]) -> dict[str, Reply]:
        """A chain of thought per problem, ending with ``#### <answer>``."""

    @abstractmethod
    def write_cod(self, problems: Sequence[Problem], cots: Mapping[str, str]) -> dict[str, Reply]:
        """A chain of draft per problem, compressed from ``cots[problem.id]``."""


class SolutionTeacher(Teacher):
    """A teacher without a model: both texts derived from the problem's gold solution."""

    @abstractmethod
    def solve(self, problem: Problem) -> tuple[str, str]:
        """The (CoT, CoD) texts of one problem."""

    def write_cot(self, problems: Sequence[Problem]) -> dict[str, Reply]:
        return {p.id: Reply(p.id, self.solve(p)[0], "stop") for p in problems}

    def write_cod(self, problems: Sequence[Problem], cots: Mapping[str, str]) -> dict[str, Reply]:
        return {p.id: Reply(p.id, self.solve(p)[1], "stop") for p in problems}


class PromptedTeacher(Teacher):
    """An LLM teacher: requests built from prompt templates, one ``complete`` per stage."""

    def __init__(self, prompts: TeacherPrompts, bounds: CodBounds) -> None:
        self.prompts = prompts
        self.bounds = bounds

    def write_cot(self, problems: Sequence[Problem]) -> dict[str, Reply]:
        return self.complete([self.prompts.cot_request(p) for p in problems], stage="cot")

    def write_cod(self, problems: Sequence[Problem], cots: Mapping[str, str]) -> dict[str, Reply]:
        requests = [self.prompts.cod_request(p, cots[p.id], self.bounds) for p in problems]
        return self.complete(requests, stage="cod")

    @abstractmethod
    def complete(self, requests: Sequence[TeacherRequest], stage: str) -> dict[str, Reply]:
        """Answer every request; a request the backend could not answer gets an error reply."""
