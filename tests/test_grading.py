"""Answer extraction and equivalence: each case pins one verdict of one grading rule."""

import pytest

from harness.data.grading import (
    INVALID,
    extract_answer,
    grade,
    last_boxed,
    math_equivalent,
    normalize_math,
    option_letter,
    parse_number,
)

# (model output, gold, correct) per GSM8K rule
NUMBER_RULES = {
    "first number on the first #### line": [
        ("Step 1: 3 + 4 = 7\n#### 7", "7", True),
        ("#### 18\nQuestion: Tom has 20 apples.\n#### 20", "18", True),
        ("#### 18\nQuestion: Tom has 20 apples.\n#### 20", "20", False),
        ("#### 18 then 25", "25", False),
        ("So 5 more.\n#### The answer is 18 dollars.", "18", True),
        ("####12", "12", True),
        ("answer: 5 #### 6", "6", True),
        ("#### Step 1: eggs\n16 - 3 - 4 = 9\n#### Step 2: money\n9 * 2 = 18\n#### 18", "18", True),
        ("#### Step 1: eggs\n16 - 3 - 4 = 9, so 9 * 2 = 18", "18", True),  # headings only
    ],
    "#### without a number is no answer, no fallback": [
        ("She makes 18 dollars.\n####", "18", False),
        ("She makes 18 dollars.\n#### \nmore text", "18", False),
        ("She makes 18 dollars.\n#### eighteen", "18", False),
    ],
    "without ####, the last number": [
        ("He buys 3 then 4 more, so 7 in total", "7", True),
        ("He buys 3 then 4 more, so 7 in total", "4", False),
        ("The answer is 42.", "42", True),
        ("The total is \\boxed{1,000}.", "1000", True),
        ("16 - 3 - 4 = 9 eggs, sold at $2: 9 * 2", "2", True),  # cut off: still last number
    ],
    "empty or number-free output is wrong": [
        ("", "3", False),
        ("no digits at all", "3", False),
    ],
    "cosmetics around the number": [
        ("#### 1,234", "1234", True),
        ("#### $1,200.00", "1200", True),
        ("#### **18**", "18", True),
        ("She has 18.", "18", True),
        ("#### 18 dollars", "18", True),
        ("The side is 5 cm", "5", True),
        ("#### 1,234,567", "1234567", True),
    ],
    "numbers by exact value": [
        ("#### 42.0", "42", True),
        ("#### .5", "0.5", True),
        ("#### 007", "7", True),
        ("#### 1/2", "0.5", True),
        ("#### 3/4", "0.75", True),
        ("#### \\frac{3}{4}", "0.75", True),
        ("#### 1e3", "1000", True),
        ("#### 2.5E-1", "0.25", True),
        ("#### \u22123", "-3", True),
        ("#### -5", "-5", True),
        ("#### 5", "-5", False),
        ("The change is 10 - 3 = 7", "7", True),  # a minus between numbers is no sign
    ],
    "% dropped, never rescaled": [
        ("#### 25%", "25", True),
        ("#### 10 %", "10", True),
        ("#### 0.25", "25", False),
        ("#### 25", "0.25", False),
    ],
    "no rounding, no substring": [
        ("#### 18.5", "18", False),
        ("#### 180", "18", False),
        ("#### 18", "180", False),
        ("#### 17.99", "18", False),
    ],
}

MATH_RULES = {
    "value equivalence": [
        ("\\boxed{2/4}", "\\frac{1}{2}", True),
        ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt2}{2}", True),
        ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
        ("\\boxed{x = 5}", "5", True),
        ("\\boxed{-3, 5}", "5,-3", True),
        ("So $x = \\boxed{2\\sqrt{3}}$.", "\\sqrt{12}", True),
        ("#### \\dfrac{1}{2}", "\\frac12", True),
        ("#### (x+2)(x+5)", "x^2+7x+10", True),
        ("#### \\{2,1\\}", "\\{1,2\\}", True),
        ("\\boxed{5}", "6", False),
    ],
    "inequality for an interval, infinity": [
        ("\\boxed{x > 2}", "(2,\\infty)", True),
        ("\\boxed{x \\geq 2}", "(2,\\infty)", False),
        ("\\boxed{(2, infinity)}", "(2,\\infty)", True),
        ("\\boxed{\\text{infinity}}", "\\infty", True),
    ],
    "decimal approximations do not count, exact decimals do": [
        ("\\boxed{0.33}", "\\frac{1}{3}", False),
        ("\\boxed{0.333333}", "\\frac{1}{3}", False),
        ("\\boxed{6.28}", "2\\pi", False),
        ("\\boxed{3.14159265}", "\\pi", False),
        ("\\boxed{1.414214}", "\\sqrt{2}", False),
        ("\\boxed{0.5}", "\\frac{1}{2}", True),
        ("\\boxed{1.25}", "\\frac54", True),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),
        ("\\boxed{0.\\overline{3}}", "\\frac{1}{3}", True),
        ("\\boxed{0.1\\overline{6}}", "\\frac{1}{6}", True),
        ("\\boxed{0.\\overline{3}}", "0.3", False),
    ],
    "percent, units and wrappers are cosmetic": [
        ("\\boxed{50\\%}", "50", True),
        ("\\boxed{50}", "50\\%", True),
        ("\\boxed{0.5}", "50\\%", False),
        ("\\boxed{90^\\circ}", "90", True),
        ("\\boxed{\\$5.50}", "5.50", True),
        ("\\boxed{5\\text{ cm}}", "5", True),
        ("\\boxed{5\\text{}}", "5", True),
        ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)", True),
    ],
    "option letters": [
        ("\\boxed{C}", "\\text{(C)}", True),
        ("\\boxed{\\text{(C)}}", "C", True),
        ("\\boxed{(C)}", "\\text{(C)}", True),
        ("\\boxed{D}", "\\text{(C)}", False),
        ("The correct option is (B).", "\\text{(B)}", True),
        ("The correct option is (B).", "\\text{(C)}", False),
    ],
    "an ordered pair is not a set, brackets matter": [
        ("\\boxed{\\{1,2\\}}", "(1,2)", False),
        ("\\boxed{(1,2)}", "\\{1,2\\}", False),
        ("\\boxed{(1,2,3)}", "\\{1,2,3\\}", False),
        ("\\boxed{(1,2)}", "(2,1)", False),
        ("\\boxed{(3,-1)}", "(5,-2)", False),
        ("\\boxed{(\\frac{1}{2}, 3)}", "(0.5,3)", True),
        ("\\boxed{[2,3)}", "[2,3]", False),
        ("#### (-\\infty, 3]", "(-\\infty,3]", True),
        ("#### (-\\infty, 3)", "(-\\infty,3]", False),
    ],
    "the last box, else the final stated answer": [
        ("First \\boxed{1}, corrected: \\boxed{2}", "2", True),
        ("First \\boxed{1}, corrected: \\boxed{2}", "1", False),
        ("Final Answer: The final answer is $5$. I hope it is correct.", "5", True),
        ("Final Answer: The final answer is $\\frac{3}{2}$.", "\\frac32", True),
        ("Solving the equation.\nTherefore $x = 5$.", "5", True),
        ("The roots are $x = 2$ and $x = -3$.", "-3, 2", True),
        ("the answer is \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", True),
        ("#### Step 1: factor\n(x-5)^2 = 0\nThe answer is $5$.", "5", True),
    ],
    "no committed answer is wrong": [
        ("We get \\boxed{}", "5", False),
        ("First \\boxed{5}, then \\boxed{}", "5", False),
        ("I cannot solve this.", "3", False),
        ("We need 5 apples", "5", False),
        ("The equation is x^2 = 25.\nLet's try x = 5", "5", False),
        ("The equation is x^2 = 25.\nChecking x = 5: 5^2 = 25", "5", False),
        ("If x = 5", "5", False),
    ],
}


def _cases(rules: dict) -> list:
    return [
        pytest.param(*case, id=f"{rule}: {case[0][:40]!r} vs {case[1]!r}")
        for rule, cases in rules.items()
        for case in cases
    ]


@pytest.mark.parametrize(("text", "gold", "correct"), _cases(NUMBER_RULES))
def test_number_rules(text, gold, correct):
    assert grade(text, gold, "number").correct is correct


@pytest.mark.parametrize(("text", "gold", "correct"), _cases(MATH_RULES))
def test_math_rules(text, gold, correct):
    assert grade(text, gold, "math").correct is correct


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("#### 18", True, True),
        ("#### 18\nQuestion: she has 5 apples", True, False),  # lm-eval's two columns part
        ("She makes 18 dollars.", False, True),  # no #### : strict has nothing
        ("She makes 18 dollars.\n####", False, True),
        ("#### 5\nso 18", False, True),
    ],
)
def test_number_strict_is_hash_only_and_flexible_is_the_last_number(text, strict, flexible):
    verdict = grade(text, "18", "number")
    assert (verdict.correct_strict, verdict.correct_flexible) == (strict, flexible)


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("so \\boxed{5}", True, True),
        ("#### 5", True, True),
        ("Final Answer: The final answer is $5$. I hope it is correct.", True, True),
        ("The answer is $5$.", False, True),
        ("Hence\nSo $x = 5$.", False, True),
        ("no answer", False, False),
    ],
)
def test_math_strict_is_committed_formats_and_flexible_is_any_extractor(text, strict, flexible):
    verdict = grade(text, "5", "math")
    assert (verdict.correct_strict, verdict.correct_flexible) == (strict, flexible)
    assert verdict.correct == flexible


def test_extractor_name_says_which_rule_fired():
    assert extract_answer("x #### 4", "number") == ("4", "hash")
    assert extract_answer("x ####", "number") == (INVALID, "hash")
    assert extract_answer("3 and then 4", "number") == ("4", "last_number")
    assert extract_answer("so \\boxed{4}", "math") == ("4", "boxed")
    assert extract_answer("so \\boxed{}", "math") == (INVALID, "boxed")
    assert extract_answer("The final answer is $4$.", "math") == ("4", "final_answer")
    assert extract_answer("The answer is $4$.", "math") == ("4", "answer_is")
    assert extract_answer("Thus $y = 4$.", "math") == ("4", "closing")


def test_unparsable_output_is_invalid_not_an_exception():
    verdict = grade("I do not know", "\\frac{1}{2}", "math")
    assert verdict.pred_answer == INVALID
    assert verdict.extractor == "none"
    assert (verdict.correct, verdict.correct_strict, verdict.correct_flexible) == (
        False,
        False,
        False,
    )


def test_exotic_latex_is_not_equivalent_and_does_not_raise():
    assert math_equivalent("\\frac{\\frac{", "1") is False
    assert math_equivalent("\\begin{pmatrix}1", "\\begin{pmatrix}1\\end{pmatrix}") is False


def test_last_boxed_matches_nested_braces_and_takes_the_last():
    text = "first \\boxed{1} then \\boxed{\\frac{a}{\\sqrt{b}}} done"
    assert last_boxed(text) == "\\frac{a}{\\sqrt{b}}"
    assert last_boxed("\\boxed 7$") == "7"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("none here") is None


def test_parse_number_is_exact():
    assert parse_number("$1,234.50 per day") == parse_number("1234.5")
    assert parse_number("1/3") != parse_number("0.333333")
    assert parse_number("no number") is None


def test_normalize_math_removes_display_noise():
    assert normalize_math("\\left( \\dfrac{1}{2} \\right)") == "(\\frac{1}{2})"
    assert normalize_math("$45^{\\circ}$.") == "45"
    assert normalize_math("0.\\overline{6}") == "\\frac{2}{3}"


def test_option_letter_reads_wrapped_letters_only():
    assert option_letter("\\text{(C)}") == "C"
    assert option_letter("\\textbf{(E)}") == "E"
    assert option_letter("C") == "C"
    assert option_letter("c") is None
    assert option_letter("CD") is None


def test_unknown_style_is_rejected_by_name():
    with pytest.raises(ValueError, match="answer style 'latex' unknown"):
        extract_answer("#### 1", "latex")
