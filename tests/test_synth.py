"""The synthetic problem generator and its exact teacher: determinism, splits, answers, CoT and CoD."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from harness.data import synth
from train.formats import CodBounds, check_cod
from train.teachers.synthetic import solutions

DIFFICULTIES = ("easy", "medium", "hard")


def _equations(text: str) -> list[tuple[int, str, int, int]]:
    return [
        (int(a), op, int(b), int(r))
        for a, op, b, r in re.findall(r"(\d+) ?([-+*/]) ?(\d+) ?= ?(\d+)", text)
    ]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_same_arguments_give_the_same_problems(difficulty):
    assert synth.generate(difficulty, "test", 20, 7) == synth.generate(difficulty, "test", 20, 7)


def test_different_seeds_give_different_problems():
    a = {p.id for p in synth.generate("easy", "train", 50, 0)}
    b = {p.id for p in synth.generate("easy", "train", 50, 1)}
    assert len(a & b) < 10


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_splits_never_share_a_question_or_id(difficulty):
    splits = {s: synth.generate(difficulty, s, 300, 0) for s in ("train", "val", "test")}
    for problems in splits.values():
        assert len({p.id for p in problems}) == len(problems) == 300
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not {p.id for p in splits[a]} & {p.id for p in splits[b]}
        assert not {p.question for p in splits[a]} & {p.question for p in splits[b]}
    other_seed = synth.generate(difficulty, "train", 300, 1)
    assert not {p.question for p in other_seed} & {p.question for p in splits["test"]}


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_records_carry_dataset_difficulty_and_number_style(difficulty):
    for p in synth.generate(difficulty, "val", 10, 0):
        assert p.dataset == f"synth_{difficulty}"
        assert p.difficulty == difficulty
        assert p.answer_style == "number"
        assert p.id.startswith(f"synth_{difficulty}-")
        assert synth.split_of(p.question) == "val"


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_gold_answer_is_the_result_of_a_correct_equation_chain(difficulty):
    level = synth.LEVELS[difficulty]
    apply = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}
    for p in synth.generate(difficulty, "test", 100, 0):
        steps = _equations(p.gold_solution)
        assert level.ops[0] <= len(steps) <= level.ops[1]
        for (a, op, b, r), nxt in zip(steps, [*steps[1:], None], strict=True):
            assert apply[op](a, b) == r
            assert op != "/" or a % b == 0
            assert 0 <= r <= level.max_value
            if nxt is not None:
                assert nxt[0] == r
        assert str(steps[-1][3]) == p.gold_answer
        assert p.gold_solution.endswith(f"#### {p.gold_answer}")


def test_numbers_grow_with_difficulty():
    means = []
    for d in DIFFICULTIES:
        problems = synth.generate(d, "train", 300, 0)
        means.append(sum(int(p.gold_answer) for p in problems) / len(problems))
        steps = [len(_equations(p.gold_solution)) for p in problems]
        assert min(steps) == synth.LEVELS[d].ops[0]
        assert max(steps) == synth.LEVELS[d].ops[1]
    assert means[0] < means[1] < means[2]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_cod_has_at_most_five_steps_of_five_words_and_the_same_equations(difficulty):
    for p in synth.generate(difficulty, "test", 100, 0):
        cot, cod = solutions(p)
        assert cot == p.gold_solution
        assert cod.split("\n")[-1] == f"#### {p.gold_answer}"
        assert check_cod(cod, CodBounds(min_steps=1)).ok  # the study's 5 steps of 5 words
        assert _equations(cod) == _equations(cot)


def test_cot_restates_every_question_sentence_in_order():
    p = synth.generate("medium", "test", 1, 3)[0]
    body = p.question.rsplit(". ", 1)[0] + "."
    sentences = re.findall(r"[^.]+\.", body)
    lines = p.gold_solution.split("\n")
    for i, sentence in enumerate(sentences):
        assert lines[i].startswith(f"{i + 1}. {sentence.strip()}")


def test_cod_is_far_shorter_than_cot():
    problems = synth.generate("hard", "test", 50, 0)
    cot = sum(len(solutions(p)[0]) for p in problems)
    cod = sum(len(solutions(p)[1]) for p in problems)
    assert cod < 0.3 * cot


def test_cod_lines_are_the_spaced_equations_of_the_cot():
    p = synth.generate("medium", "test", 1, 0)[0]
    cot, cod = solutions(p)
    for line in cod.split("\n")[:-1]:
        assert f" {line}." in cot


def test_solutions_rejects_a_non_synthetic_problem():
    p = synth.generate("easy", "test", 1, 0)[0]
    with pytest.raises(ValueError, match="gsm-1"):
        solutions(replace(p, id="gsm-1", gold_solution="She has 3. #### 3"))


@pytest.mark.parametrize(
    ("args", "bad"),
    [(("extreme", "test", 1, 0), "difficulty='extreme'"), (("easy", "dev", 1, 0), "split='dev'")],
)
def test_bad_arguments_name_the_bad_value(args, bad):
    with pytest.raises(ValueError, match=re.escape(bad)):
        synth.generate(*args)
