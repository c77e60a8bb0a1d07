"""Answer extraction and grading.

Extraction is a chain of small named extractors tried in order (the lm-eval pattern):
``hash`` (text after the last ``####``), ``boxed`` (last ``\\boxed{...}`` with nested
braces), ``answer_is`` ("the answer is X") and, for numeric answers only,
``last_number``. What none of them finds is :data:`INVALID`, never an exception.

Comparison depends on the problem's ``answer_style``:

- ``number`` (GSM8K, synthetic): exact rational comparison after dropping commas,
  currency signs, units and trailing zeros ("$1,234.50 dollars" == "1234.5").
- ``math`` (MATH): normalised string equality, else math-verify's symbolic
  equivalence (fractions, ``\\dfrac``, radicals, intervals, sets) under a timeout;
  a timeout or parse failure counts as not equivalent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

INVALID = "[invalid]"
STYLES = ("number", "math")

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_IS = re.compile(r"answer is[:\s]*(.+?)(?:\.\s|\.$|\n|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Grade:
    """The verdict on one model output."""

    pred_answer: str
    correct: bool
    extractor: str


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), matching nested braces."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        # "\boxed 5" form: the token after the space
        rest = text[start:].split(maxsplit=1)
        return rest[1].split()[0].rstrip("$.") if len(rest) == 2 else None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i].strip()
    return None


def _after_hash(text: str) -> str | None:
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip()
    return tail.splitlines()[0].strip() if tail else None


def _answer_is(text: str) -> str | None:
    found = _ANSWER_IS.findall(text)
    return found[-1].strip() if found else None


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


Extractor = Callable[[str], "str | None"]
EXTRACTORS: dict[str, tuple[tuple[str, Extractor], ...]] = {
    "number": (
        ("hash", _after_hash),
        ("boxed", last_boxed),
        ("answer_is", _answer_is),
        ("last_number", _last_number),
    ),
    "math": (("hash", _after_hash), ("boxed", last_boxed), ("answer_is", _answer_is)),
}


def extract_answer(text: str, style: str) -> tuple[str, str]:
    """The final answer in ``text`` and the name of the extractor that found it."""
    if style not in EXTRACTORS:
        raise ValueError(f"answer style {style!r} unknown; use one of {', '.join(STYLES)}")
    for name, extractor in EXTRACTORS[style]:
        found = extractor(text)
        if found:
            return found, name
    return INVALID, "none"


def parse_number(answer: str) -> Fraction | None:
    """The first number in an answer string as an exact fraction, or None.

    Drops thousands separators, ``$`` and any units around the number.
    """
    match = _NUMBER.search(answer.replace("\\$", "").replace("$", ""))
    if match is None:
        return None
    token = match.group().replace(",", "")
    try:
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


_LATEX_NOISE = (
    (re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ "), ""),
    (re.compile(r"\^\{?\\circ\}?"), ""),
    (re.compile(r"\\%|%"), ""),
    (re.compile(r"\\\$|\$"), ""),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (re.compile(r"\s+"), ""),
)


def normalize_math(answer: str) -> str:
    """Canonical string form of a MATH answer for the fast equality check."""
    for pattern, replacement in _LATEX_NOISE:
        answer = pattern.sub(replacement, answer)
    return answer.rstrip(".")


def _math_equivalent(pred: str, gold: str) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    in_main = threading.current_thread() is threading.main_thread()
    timeout = 5 if in_main else None  # math-verify's timeout uses SIGALRM: main thread only
    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        gold_parsed = parse(f"\\boxed{{{gold}}}", config, parsing_timeout=timeout)
        pred_parsed = parse(f"\\boxed{{{pred}}}", config, parsing_timeout=timeout)
        return bool(
            gold_parsed
            and pred_parsed
            and verify(gold_parsed, pred_parsed, timeout_seconds=timeout)
        )
    except Exception:  # math-verify raises on timeouts and exotic LaTeX: not equivalent
        return False


def is_equivalent(pred: str, gold: str, style: str) -> bool:
    """Whether a predicted answer equals the gold answer under ``style``."""
    if pred == INVALID:
        return False
    if style == "number":
        p, g = parse_number(pred), parse_number(gold)
        return p is not None and p == g
    if normalize_math(pred) == normalize_math(gold):
        return True
    return _math_equivalent(normalize_math(pred), normalize_math(gold))


def grade(text: str, gold_answer: str, style: str) -> Grade:
    """Extract the final answer from a model output and compare it with the gold answer."""
    pred, extractor = extract_answer(text, style)
    return Grade(
        pred_answer=pred, correct=is_equivalent(pred, gold_answer, style), extractor=extractor
    )
