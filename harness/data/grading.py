"""Answer extraction and grading, by the rules a careful human grader applies.

Extraction is a chain of small named extractors (the lm-eval pattern); the first that
finds something gives the answer, and what none finds is :data:`INVALID`, never an
exception. Each answer style (``number``: GSM8K, synthetic; ``math``: MATH) has three
chains (:data:`CHAINS`): the headline one, ``strict`` and ``flexible`` (lm-eval's
strict-match and flexible-extract). Each chain's extractors and equality: docs/METRICS.md.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

INVALID = "[invalid]"
STYLES = ("number", "math")
TIMEOUT_S = 5  # math-verify's per-call timeout (main thread only: it uses SIGALRM)

_PLAIN = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|\.\d+"
_NUMBER = re.compile(
    r"(?P<sign>(?<![\w)\]}]\s)(?<![\w)\]}.])-)?(?<![\w.])"
    rf"(?:\\[dt]?frac\{{(?P<fnum>{_PLAIN})\}}\{{(?P<fden>{_PLAIN})\}}"
    rf"|(?P<num>{_PLAIN})(?:/(?P<den>\d+)(?![\d.]))?)"
)
_NUMBER_NOISE = re.compile(r"\\?\$|\*\*")
_ANSWER_IS = re.compile(
    r"(?:answer|option|choice)\s*(?:is|:)\s*:?\s*(.+?)\s*(?:\.\s|\.?$|\n)",
    re.IGNORECASE | re.MULTILINE,
)
_FINAL_ANSWER = re.compile(r"final answer is\s*(.+?)\s*(?:\.\s*I hope.*)?\.?\s*$", re.I | re.M)
_CLOSING = re.compile(r"(?<![\w\\])[a-zA-Z]\s*=\s*([^=$]+?)\s*(?=\$|,?\s+(?:and|or)\s|\.?\s*$)")
_HEADING = re.compile(r"(?:Step|Part|Case|Stage)\s*\d+\b", re.IGNORECASE)
_HEDGES = re.compile(
    r"\b(?:try|trying|check|checking|test|testing|suppose|assume|if|plug|plugging|"
    r"substitut\w*|verify|let's|let us|guess|maybe|perhaps)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Grade:
    """The verdict on one model output: headline answer and verdict, and the strict and
    flexible verdicts (:data:`CHAINS`)."""

    pred_answer: str
    correct: bool
    extractor: str
    correct_strict: bool
    correct_flexible: bool


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), matching nested braces."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0 or text[start:brace].strip() not in ("\\boxed", "\\fbox"):
        # "\boxed 5" form: the token after the space
        rest = text[start:].split(maxsplit=1)
        return rest[1].split()[0].rstrip("$.") if len(rest) == 2 else None
    close = _closing_brace(text, brace)
    return None if close is None else text[brace + 1 : close].strip()


def _closing_brace(text: str, opening: int) -> int | None:
    pairs = {"{": "}", "(": ")", "[": "]"}
    depth = 0
    for i in range(opening, len(text)):
        if text[i] in pairs:
            depth += 1
        elif text[i] in pairs.values():
            depth -= 1
            if depth == 0:
                return i
    return None


def _hash_line(text: str) -> str | None:
    """The rest of the first ``####`` line ("" when it is blank), None without ``####``.

    Markdown headings such as ``#### Step 1: ...`` are not answer lines.
    """
    lines = (part.split("\n", 1)[0].strip() for part in text.split("####")[1:])
    return next((line for line in lines if not _HEADING.match(line)), None)


def _numbers(text: str) -> list[tuple[str, Fraction]]:
    """Every number in ``text``: (its text, its exact value)."""
    text = _NUMBER_NOISE.sub("", text.replace("\u2212", "-"))
    found = []
    for m in _NUMBER.finditer(text):
        num, den = (m["fnum"], m["fden"]) if m["fnum"] else (m["num"], m["den"] or "1")
        try:
            value = Fraction(num.replace(",", "")) / Fraction(den.replace(",", ""))
        except (ValueError, ZeroDivisionError):
            continue
        found.append((m.group(), -value if m["sign"] else value))
    return found


def parse_number(answer: str) -> Fraction | None:
    """The first number in ``answer`` as an exact fraction, or None."""
    found = _numbers(answer)
    return found[0][1] if found else None


def _hash_number(text: str) -> str | None:
    line = _hash_line(text)
    if line is None:
        return None
    found = _numbers(line)
    return found[0][0] if found else INVALID


def _last_number(text: str) -> str | None:
    found = _numbers(text)
    return found[-1][0] if found else None


def _boxed(text: str) -> str | None:
    found = last_boxed(text)
    return INVALID if found is not None and not _unwrap_dollars(found) else found


def _unwrap_dollars(answer: str) -> str:
    return answer.strip().strip("$").strip()


def _final_answer(text: str) -> str | None:
    found = _FINAL_ANSWER.findall(text)
    return _unwrap_dollars(found[-1]) if found else None


def _answer_is(text: str) -> str | None:
    found = _ANSWER_IS.findall(text)
    return _unwrap_dollars(found[-1]) if found else None


def _closing(text: str) -> str | None:
    """A closing ``x = 5`` (or ``x = 2 or x = 3``) on the last line, unless it is a try."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines or _HEDGES.search(lines[-1]) or lines[-1].rstrip().endswith(("?", ":")):
        return None
    values = _CLOSING.findall(lines[-1])
    return ", ".join(v.strip() for v in values) if values else None


def _math_hash(text: str) -> str | None:
    return _hash_line(text) or None


Extractor = Callable[[str], "str | None"]
_MATH_STRICT: tuple[tuple[str, Extractor], ...] = (
    ("boxed", _boxed),
    ("hash", _math_hash),
    ("final_answer", _final_answer),
)
# style -> chain name -> extractors tried in order
CHAINS: dict[str, dict[str, tuple[tuple[str, Extractor], ...]]] = {
    "number": {
        "headline": (("hash", _hash_number), ("last_number", _last_number)),
        "strict": (("hash", _hash_number),),
        "flexible": (("last_number", _last_number),),
    },
    "math": {
        "headline": (*_MATH_STRICT, ("answer_is", _answer_is), ("closing", _closing)),
        "strict": _MATH_STRICT,
        "flexible": (*_MATH_STRICT, ("answer_is", _answer_is), ("closing", _closing)),
    },
}


def extract_answer(text: str, style: str, chain: str = "headline") -> tuple[str, str]:
    """The final answer in ``text`` and the name of the extractor that found it."""
    if style not in CHAINS:
        raise ValueError(f"answer style {style!r} unknown; use one of {', '.join(STYLES)}")
    for name, extractor in CHAINS[style][chain]:
        found = extractor(text)
        if found:
            return found, name
    return INVALID, "none"


_LATEX_NOISE = (
    (re.compile(r"\\left|\\right|\\!|\\,|\\;|\\:|\\ |\\displaystyle"), ""),
    (re.compile(r"\^\s*\{?\\circ\}?|\\degree"), ""),
    (re.compile(r"\\%|%|\\\$|\$"), ""),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (
        re.compile(r"\\(?:text|mbox|mathrm)\{\s*(?:\\infty|infinity|inf)\s*\}|\binfinity\b"),
        r"\\infty",
    ),
    (re.compile(r"\\(?:text|mbox|mathrm|textbf)\{\s*\}"), ""),
    (
        re.compile(r"(?<=[\w}])\s*\\(?:text|mbox|mathrm)\{\s*(?!or\b|and\b)[a-zA-Z][a-zA-Z. ]*\}"),
        "",
    ),
    (re.compile(r"\s+"), ""),
)
_REPEATING = re.compile(r"(\d*)\.(\d*)\\(?:overline|bar)\{?(\d+)\}?")
_OPTION = re.compile(r"\(?([A-E])\)?\.?")
_OPTION_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def _repeating(m: re.Match) -> str:
    whole, fixed, cycle = m[1] or "0", m[2], m[3]
    value = Fraction(int(whole)) + Fraction(int(fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(cycle), 10 ** len(fixed) * (10 ** len(cycle) - 1))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def normalize_math(answer: str) -> str:
    """Canonical string form of a MATH answer: no delimiters, units, spacing or wrappers."""
    answer = _REPEATING.sub(_repeating, answer)
    for pattern, replacement in _LATEX_NOISE:
        answer = pattern.sub(replacement, answer)
    return answer.rstrip(".")


def option_letter(answer: str) -> str | None:
    """The multiple-choice letter an answer names (``C``, ``(C)``, ``\\text{(C)}``), or None."""
    m = _OPTION.fullmatch(_OPTION_WRAPPER.sub(r"\1", answer).replace(" ", ""))
    return m[1] if m else None


def _shape(answer: str) -> tuple[str, list[str]]:
    """("set" | "(]" style brackets | "plain", top-level items) of a normalised answer."""
    if answer.startswith("\\{") and answer.endswith("\\}"):
        return "set", _split_top(answer[2:-2])
    if answer[:1] in "([" and _closing_brace(answer, 0) == len(answer) - 1:
        items = _split_top(answer[1:-1])
        if len(items) > 1:
            return answer[0] + answer[-1], items
    return "plain", [answer]


def _split_top(inner: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch in "{([") - (ch in "})]")
        if ch == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    return [*items, inner[start:]]


def _exact(parsed: list[Any]) -> list[Any]:
    """math-verify parses with decimals as exact rationals, so 0.333333 is not 1/3."""
    from sympy import Basic, Float, Rational

    exact = []
    for item in parsed:
        if isinstance(item, Basic):
            item = item.xreplace({f: Rational(str(f)) for f in item.atoms(Float)})
        exact.append(item)
    return exact


def _math_verify(pred: str, gold: str) -> bool:
    """math-verify's equivalence; a timeout or parse failure is not equivalent."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        gold_parsed = _exact(parse(f"\\boxed{{{gold}}}", config, parsing_timeout=timeout))
        pred_parsed = _exact(parse(f"\\boxed{{{pred}}}", config, parsing_timeout=timeout))
        return bool(
            gold_parsed
            and pred_parsed
            and verify(
                gold_parsed, pred_parsed, timeout_seconds=timeout, allow_set_relation_comp=True
            )
        )
    except BaseException as exc:  # math-verify raises on exotic LaTeX; timeouts are BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return False


def math_equivalent(pred: str, gold: str) -> bool:
    """Whether two MATH answers (extracted, not normalised) name the same value."""
    gold_letter = option_letter(gold)
    if gold_letter is not None:
        return option_letter(pred) == gold_letter
    pred, gold = normalize_math(pred), normalize_math(gold)
    if not pred:
        return False
    if pred == gold:
        return True
    (pred_kind, pred_items), (gold_kind, gold_items) = _shape(pred), _shape(gold)
    if "plain" not in (pred_kind, gold_kind):
        if pred_kind == "set" and gold_kind == "set":
            return _math_verify(pred, gold)
        return (
            pred_kind == gold_kind
            and len(pred_items) == len(gold_items)
            and all(map(math_equivalent, pred_items, gold_items))
        )
    return _math_verify(pred, gold)


def is_equivalent(pred: str, gold: str, style: str) -> bool:
    """Whether a predicted answer equals the gold answer under ``style``."""
    if pred == INVALID:
        return False
    if style == "number":
        p, g = parse_number(pred), parse_number(gold)
        return p is not None and p == g
    return math_equivalent(pred, gold)


def grade(text: str, gold_answer: str, style: str) -> Grade:
    """Extract the answers from a model output and compare them with the gold answer."""
    verdicts: dict[str, bool] = {}

    def judge(chain: str) -> tuple[str, str, bool]:
        pred, extractor = extract_answer(text, style, chain)
        if pred not in verdicts:
            verdicts[pred] = is_equivalent(pred, gold_answer, style)
        return pred, extractor, verdicts[pred]

    pred, extractor, correct = judge("headline")
    return Grade(
        pred_answer=pred,
        correct=correct,
        extractor=extractor,
        correct_strict=judge("strict")[2],
        correct_flexible=judge("flexible")[2],
    )
