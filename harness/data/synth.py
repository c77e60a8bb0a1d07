"""The synthetic problem generator: seeded arithmetic word problems of the tiny world.

A problem is a story whose quantity goes through a chain of operations (add, subtract,
multiply by a small factor, divide evenly), deeper with difficulty (:data:`LEVELS`).
Everything is seeded; each question text is hashed to exactly one split (train, val and
test never share one) and ids are the same hash. The gold solution is the exact CoT (each
sentence restated with its equation, then ``#### <answer>``); the exact CoD is derived
from it by :mod:`train.teachers.synthetic`. The curriculum and why: docs/TINY_WORLD.md.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cache

from harness.data.problems import Problem

SPLITS = {"train": (0, 80), "val": (80, 90), "test": (90, 100)}  # percent buckets


@dataclass(frozen=True)
class Level:
    """Depth and number ranges of one difficulty."""

    ops: tuple[int, int]  # min, max operations
    start: tuple[int, int]  # starting quantity
    operand: tuple[int, int]  # added / subtracted amounts
    factors: tuple[int, ...]  # multipliers and divisors
    max_value: int  # the running value never exceeds this
    weights: tuple[float, float, float, float]  # add, sub, mul, div


LEVELS = {
    "easy": Level((1, 2), (2, 12), (1, 9), (2,), 20, (0.4, 0.4, 0.1, 0.1)),
    "medium": Level((3, 4), (2, 15), (1, 9), (2, 3), 25, (0.35, 0.35, 0.15, 0.15)),
    "hard": Level((5, 5), (2, 15), (1, 9), (2, 3), 30, (0.35, 0.35, 0.15, 0.15)),
}

SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_APPLY = {
    "add": lambda v, x: v + x,
    "sub": lambda v, x: v - x,
    "mul": lambda v, x: v * x,
    "div": lambda v, x: v // x,
}

NAMES = (
    ("Mia", "she"),
    ("Tom", "he"),
    ("Ava", "she"),
    ("Leo", "he"),
    ("Zoe", "she"),
    ("Sam", "he"),
    ("Lily", "she"),
    ("Max", "he"),
    ("Emma", "she"),
    ("Ben", "he"),
    ("Nora", "she"),
    ("Jack", "he"),
    ("Ruby", "she"),
    ("Owen", "he"),
    ("Ella", "she"),
    ("Luke", "he"),
    ("Ivy", "she"),
    ("Noah", "he"),
    ("Anna", "she"),
    ("Omar", "he"),
)
_OBJECT = {"he": "him", "she": "her"}

# A frame: the opening sentence, sentences per operation and the final question.
# Placeholders: {name} {P} (subject pronoun, capitalised) {o} (object pronoun) {thing}
# {x} (quantity or operand) {k} (factor).
FRAMES = (
    {
        "things": ("stickers", "marbles", "apples", "cards", "coins", "shells", "books"),
        "start": "{name} has {x} {thing}.",
        "add": (
            "{P} buys {x} more {thing}.",
            "{P} finds {x} {thing}.",
            "A friend gives {o} {x} {thing}.",
        ),
        "sub": ("{P} gives {x} {thing} to a friend.", "{P} loses {x} {thing}."),
        "mul": ("The number of {thing} {name} has becomes {k} times as large.",),
        "div": ("{P} splits the {thing} into {k} equal piles and keeps one pile.",),
        "question": "How many {thing} does {name} have now?",
        "answer": "{name} has {x} {thing} now.",
    },
    {
        "things": ("liters", "gallons", "cups"),
        "start": "A tank holds {x} {thing} of water.",
        "add": ("{x} more {thing} are poured into the tank.", "Rain adds {x} {thing}."),
        "sub": ("{x} {thing} leak out of the tank.", "{name} uses {x} {thing} of the water."),
        "mul": ("The amount of water in the tank grows {k} times.",),
        "div": ("The water is split equally into {k} tanks and one tank is kept.",),
        "question": "How many {thing} of water are in the tank now?",
        "answer": "The tank holds {x} {thing} now.",
    },
    {
        "things": ("passengers",),
        "start": "A bus has {x} passengers.",
        "add": ("At a stop, {x} people get on the bus.", "{x} more passengers get on."),
        "sub": ("At a stop, {x} people get off the bus.", "{x} passengers get off."),
        "mul": ("The number of passengers becomes {k} times as large.",),
        "div": ("The passengers split into {k} equal groups and only one group stays.",),
        "question": "How many passengers are on the bus now?",
        "answer": "The bus has {x} passengers now.",
    },
    {
        "things": ("dollars",),
        "start": "{name} has {x} dollars.",
        "add": ("{P} earns {x} dollars.", "{P} saves {x} more dollars."),
        "sub": ("{P} spends {x} dollars on a book.", "{P} pays {x} dollars for lunch."),
        "mul": ("The money {name} has grows {k} times.",),
        "div": ("{P} shares the money equally with {k} people and keeps one share.",),
        "question": "How many dollars does {name} have now?",
        "answer": "{name} has {x} dollars now.",
    },
    {
        "things": ("pens", "cakes", "toys", "hats", "lamps"),
        "start": "A shop has {x} {thing} in stock.",
        "add": ("A delivery brings {x} more {thing}.", "The shop makes {x} new {thing}."),
        "sub": ("The shop sells {x} {thing}.", "{x} {thing} are returned to the maker."),
        "mul": ("The stock of {thing} becomes {k} times as large.",),
        "div": ("The shop sends the {thing} equally to {k} stores and keeps one share.",),
        "question": "How many {thing} does the shop have now?",
        "answer": "The shop has {x} {thing} now.",
    },
)


@dataclass(frozen=True)
class Step:
    """One operation: ``value op operand = result`` and the sentence that states it."""

    op: str
    value: int
    operand: int
    result: int
    sentence: str

    def equation(self) -> str:
        return f"{self.value} {SYMBOL[self.op]} {self.operand} = {self.result}"


def generate(difficulty: str, split: str, n: int, seed: int) -> list[Problem]:
    """``n`` distinct problems of ``difficulty`` in ``split`` (train | val | test)."""
    return list(_generate(difficulty, split, n, seed))


@cache  # a sweep or its plan loads each dataset once per job
def _generate(difficulty: str, split: str, n: int, seed: int) -> tuple[Problem, ...]:
    if difficulty not in LEVELS:
        raise ValueError(f"difficulty={difficulty!r}: must be one of {', '.join(LEVELS)}")
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: must be one of {', '.join(SPLITS)}")
    if n < 0:
        raise ValueError(f"n={n}: must be >= 0")
    problems: list[Problem] = []
    seen: set[str] = set()
    counter = 0
    while len(problems) < n:
        rng = random.Random(f"{difficulty}:{split}:{seed}:{counter}")
        counter += 1
        question, cot, answer = _story(rng, LEVELS[difficulty])
        digest = _digest(question)
        if split_of(question) != split or digest in seen:
            continue
        seen.add(digest)
        problems.append(
            Problem(
                id=f"synth_{difficulty}-{digest}",
                dataset=f"synth_{difficulty}",
                difficulty=difficulty,
                question=question,
                gold_answer=str(answer),
                gold_solution=cot,
            )
        )
    return tuple(problems)


def split_of(question: str) -> str:
    """The one split a question text belongs to (a hash bucket)."""
    bucket = int(_digest(question), 16) % 100
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= bucket < hi)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _story(rng: random.Random, level: Level) -> tuple[str, str, int]:
    """One random question, its CoT solution and its answer."""
    frame = rng.choice(FRAMES)
    name, pronoun = rng.choice(NAMES)
    thing = rng.choice(frame["things"])
    slots = {"name": name, "P": pronoun.capitalize(), "o": _OBJECT[pronoun], "thing": thing}
    value = rng.randint(*level.start)
    opening = frame["start"].format(**slots, x=value)
    steps: list[Step] = []
    for _ in range(rng.randint(*level.ops)):
        op, operand = pick_op(rng, level, value)
        sentence = rng.choice(frame[op]).format(**slots, x=operand, k=operand)
        result = apply_op(op, value, operand)
        steps.append(Step(op, value, operand, result, sentence))
        value = result
    question = " ".join([opening, *(s.sentence for s in steps), frame["question"].format(**slots)])
    lines = [opening, *(f"{s.sentence} {s.equation()}." for s in steps)]
    lines.append(frame["answer"].format(**slots, x=value))
    cot = "\n".join([*(f"{i}. {line}" for i, line in enumerate(lines, 1)), f"#### {value}"])
    return question, cot, value


def apply_op(op: str, value: int, operand: int) -> int:
    """``value op operand`` (division is exact by construction)."""
    return _APPLY[op](value, operand)


def pick_op(rng: random.Random, level: Level, value: int) -> tuple[str, int]:
    """A random operation and operand that keep the value in ``[0, max_value]``."""
    lo, hi = level.operand
    choices: list[tuple[str, int]] = []
    weights: list[float] = []
    add = [x for x in range(lo, hi + 1) if value + x <= level.max_value]
    sub = [x for x in range(lo, hi + 1) if x <= value]
    mul = [k for k in level.factors if value * k <= level.max_value and value > 1]
    div = [k for k in level.factors if value % k == 0 and value >= 2 * k]
    for op, options, weight in zip(
        ("add", "sub", "mul", "div"), (add, sub, mul, div), level.weights, strict=True
    ):
        if options:
            choices.append((op, rng.choice(options)))
            weights.append(weight)
    return rng.choices(choices, weights)[0]
