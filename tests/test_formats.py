"""The CoD and CoT format validators give concrete verdicts with the broken rule named."""

import pytest

from harness.data import synth
from train.data_config import compose_data_config
from train.formats import CodBounds, Verdict, check_cod, check_cot, split_steps
from train.teachers.synthetic import solutions

STUDY = CodBounds(min_steps=3, max_steps=5, max_words=5)


def test_compliant_cod_passes_with_its_counts():
    text = "1. 20 apples, eat 8\n2. 20-8=12\n3. 12*2=24\n#### 24"
    assert check_cod(text, STUDY) == Verdict(True, "ok", 3, 4, "24")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n  ", "empty"),
        ("20-8=12\n12*2=24\n24/4=6", "no_final_answer"),
        ("20-8=12\n12*2=24\n24/4=6\n####", "empty_answer"),
        ("20-8=12\n12*2=24\n24/4=6\n#### 6\nSo six.", "text_after_answer"),
        ("20-8=12\n12*2=24\n#### 24", "too_few_steps"),
        ("a\nb\nc\nd\ne\nf\n#### 1", "too_many_steps"),
        ("20-8=12\nthen we double the twelve apples\n24/4=6\n#### 6", "step_too_long"),
    ],
)
def test_cod_names_the_first_broken_rule(text, reason):
    verdict = check_cod(text, STUDY)
    assert not verdict.ok
    assert verdict.reason == reason


def test_list_markers_are_not_words_or_steps():
    steps, answer, trailing = split_steps("Step 1: a b\n2) c d e\n- f\n#### 7")
    assert steps == ["a b", "c d e", "f"]
    assert answer == "7"
    assert not trailing


def test_exactly_five_words_and_five_steps_pass():
    text = "\n".join(["one two three four five"] * 5 + ["#### 5"])
    assert check_cod(text, STUDY).ok


def test_looser_minimum_accepts_single_step_drafts():
    assert check_cod("3+4=7\n#### 7", CodBounds(min_steps=1)).ok
    assert check_cod("3+4=7\n#### 7", STUDY).reason == "too_few_steps"


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="min_steps=4, max_steps=3"):
        CodBounds(min_steps=4, max_steps=3)


def test_data_config_cod_section_is_the_validators_bounds():
    cod = compose_data_config(["experiment=qwen2.5", "cod.max_words=3"]).cod
    assert cod == CodBounds(min_steps=3, max_steps=5, max_words=3)


def test_cot_rejects_calculator_tags_and_missing_steps():
    assert check_cot("1. 2*3 = <<2*3=6>>6 eggs\n#### 6").reason == "calculator_tags"
    assert check_cot("#### 6").reason == "no_steps"
    assert check_cot("1. She has 2 bags of 3.\n2. 2 * 3 = 6.\n#### 6") == Verdict(
        True, "ok", 2, 6, "6"
    )


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_synthetic_teacher_output_is_compliant(difficulty):
    bounds = CodBounds(min_steps=1)
    for problem in synth.generate(difficulty, "train", 30, seed=0):
        cot, cod = solutions(problem)
        assert check_cot(cot).ok, cot
        assert check_cod(cod, bounds).ok, cod
        assert check_cod(cod, bounds).answer == problem.gold_answer
