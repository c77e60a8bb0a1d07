"""Answer extraction and equivalence: each case pins one verdict."""

import pytest

from harness.grading import INVALID, extract_answer, grade, last_boxed, normalize_math, parse_number

NUMBER_CASES = [
    # (model output, gold, correct)
    ("Step 1: 3 + 4 = 7\n#### 7", "7", True),
    ("#### 1,234", "1234", True),
    ("#### $18.00", "18", True),
    ("#### 18 dollars", "18", True),
    ("#### 72.0", "72", True),
    ("#### -5", "-5", True),
    ("#### 5", "-5", False),
    ("#### 0.5", "1/2", True),
    ("#### 3/4", "0.75", True),
    ("The answer is 42.", "42", True),
    ("So she has 12 apples left. The answer is 12", "12", True),
    ("He buys 3 then 4 more, so 7 in total", "7", True),  # last number
    ("He buys 3 then 4 more, so 7 in total", "4", False),
    ("#### 7\nsome trailing chatter 99", "7", True),  # hash beats last number
    ("The total is \\boxed{1,000}.", "1000", True),
    ("no digits at all", "3", False),
    ("#### ", "3", False),
    ("#### 10%", "10", True),
    ("####12", "12", True),
    ("answer: 5 #### 6", "6", True),
]

MATH_CASES = [
    ("#### \\frac{1}{2}", "\\frac{1}{2}", True),
    ("#### \\dfrac{1}{2}", "\\frac12", True),
    ("#### 0.5", "\\frac{1}{2}", True),
    ("So $x = \\boxed{2\\sqrt{3}}$.", "\\sqrt{12}", True),
    ("#### (-\\infty, 3]", "(-\\infty,3]", True),
    ("#### (-\\infty, 3)", "(-\\infty,3]", False),
    ("#### \\{2,1\\}", "\\{1,2\\}", True),
    ("#### (x+2)(x+5)", "x^2+7x+10", True),
    ("#### 10\\%", "10", True),
    ("#### 90^\\circ", "90", True),
    ("#### \\$5.50", "5.50", True),
    ("the answer is \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", True),
    ("#### 5", "6", False),
    ("#### (1,2)", "(2,1)", False),
    ("I cannot solve this.", "3", False),
]


@pytest.mark.parametrize(("text", "gold", "correct"), NUMBER_CASES)
def test_number_answers_grade_as_expected(text, gold, correct):
    assert grade(text, gold, "number").correct is correct


@pytest.mark.parametrize(("text", "gold", "correct"), MATH_CASES)
def test_math_answers_grade_as_expected(text, gold, correct):
    assert grade(text, gold, "math").correct is correct


def test_extractor_name_says_which_rule_fired():
    assert extract_answer("x #### 4", "number") == ("4", "hash")
    assert extract_answer("so \\boxed{4}", "math") == ("4", "boxed")
    assert extract_answer("The answer is 4.", "number") == ("4", "answer_is")
    assert extract_answer("3 and then 4", "number") == ("4", "last_number")


def test_unparsable_output_is_invalid_not_an_exception():
    verdict = grade("I do not know", "\\frac{1}{2}", "math")
    assert verdict.pred_answer == INVALID
    assert verdict.extractor == "none"
    assert verdict.correct is False


def test_last_boxed_matches_nested_braces_and_takes_the_last():
    text = "first \\boxed{1} then \\boxed{\\frac{a}{\\sqrt{b}}} done"
    assert last_boxed(text) == "\\frac{a}{\\sqrt{b}}"
    assert last_boxed("\\boxed 7$") == "7"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("none here") is None


def test_parse_number_drops_separators_currency_and_units():
    assert parse_number("$1,234.50 per day") == parse_number("1234.5")
    assert parse_number("no number") is None


def test_normalize_math_removes_display_noise():
    assert normalize_math("\\left( \\dfrac{1}{2} \\right)") == "(\\frac{1}{2})"


def test_unknown_style_is_rejected_by_name():
    with pytest.raises(ValueError, match="answer style 'latex' unknown"):
        extract_answer("#### 1", "latex")
