"""Dataset loaders: every source (``dataset.source``) becomes a list of :class:`Problem`.

Check a local file (counts, and gold solutions graded against their own gold answers)::

    python -m harness.data.datasets dataset=gsm8k dataset.path=path/to/gsm8k_test.jsonl
    python -m harness.data.datasets dataset=math_intalg_l34 datasets_dir=path/to/datasets

Sources ``gsm8k``, ``math`` and ``synth``; ``dataset.path`` names one file, ``datasets_dir`` a
folder of files under their usual names; formats and names: docs/DATASETS.md.
"""

from __future__ import annotations

import errno
import json
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.checks import command
from harness.config import DatasetConfig, DatasetError
from harness.data.grading import grade, last_boxed
from harness.data.problems import Problem


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, row) pairs; a line that is not a JSON object yields the reason instead.

    A UTF-8 byte-order mark is tolerated; bytes that are not UTF-8 raise with their line.
    """
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{path}: line {lineno}: not UTF-8 (byte {exc.start}: {exc.reason})"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield lineno, f"not JSON ({exc.msg})"
                continue
            yield lineno, row if isinstance(row, dict) else "not a JSON object"


def _from_hub(cfg: DatasetConfig) -> Iterator[tuple[int, dict[str, Any] | str]]:
    try:
        import datasets

        rows = datasets.load_dataset(cfg.hf_id, cfg.hf_config, split=cfg.split)
    except Exception as exc:
        raise DatasetError(
            f"dataset {cfg.name}: cannot load {cfg.hf_id} ({cfg.hf_config}) from the Hugging Face hub "
            f"({type(exc).__name__}); set dataset.path=<local JSONL in the original format>"
        ) from None
    yield from enumerate(rows, start=1)


def _rows(cfg: DatasetConfig) -> Iterator[tuple[int, dict[str, Any] | str]]:
    if cfg.path is None:
        return _from_hub(cfg)
    path = Path(cfg.path).expanduser()
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        why = {errno.ENOENT: "no such file", errno.ELOOP: "a symlink loop"}.get(exc.errno)
        raise DatasetError(f"dataset.path={cfg.path}: {why or exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise DatasetError(f"dataset.path={cfg.path}: a directory; name one JSONL file")
    if not stat.S_ISREG(mode):
        raise DatasetError(f"dataset.path={cfg.path}: not a regular file; name one JSONL file")
    return _read_jsonl(path)


def _gsm8k_problem(cfg: DatasetConfig, index: int, row: dict[str, Any]) -> Problem | None:
    question, answer = row.get("question"), row.get("answer")
    if not (isinstance(question, str) and isinstance(answer, str) and "####" in answer):
        return None
    gold = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        return None
    return Problem(
        id=f"gsm8k-{cfg.split}-{index:05d}",
        dataset=cfg.name,
        difficulty=cfg.difficulty,
        question=question,
        gold_answer=gold,
        gold_solution=answer,
        answer_style="number",
    )


def _math_level(level: Any) -> int | None:
    try:
        return int(str(level).removeprefix("Level").strip())
    except ValueError:
        return None


def _math_problem(cfg: DatasetConfig, index: int, row: dict[str, Any]) -> Problem | None:
    problem, solution = row.get("problem"), row.get("solution")
    if not (isinstance(problem, str) and isinstance(solution, str)):
        return None
    gold = last_boxed(solution)
    if not gold:
        return None
    return Problem(
        id=row.get("unique_id") or f"math-{cfg.split}-{cfg.hf_config}-{index:05d}",
        dataset=cfg.name,
        difficulty=cfg.difficulty,
        question=problem,
        gold_answer=gold,
        gold_solution=solution,
        answer_style="math",
    )


def _keep_math_row(cfg: DatasetConfig, row: dict[str, Any]) -> bool:
    if cfg.math_type is not None and row.get("type") != cfg.math_type:
        return False
    return not cfg.levels or _math_level(row.get("level")) in cfg.levels


def _parse(cfg: DatasetConfig, rows: Iterable[tuple[int, dict[str, Any] | str]]) -> list[Problem]:
    """Rows to problems; malformed rows raise with their line number and cause unless allowed."""
    problems: list[Problem] = []
    bad: list[int] = []
    reason, seen = "", 0
    where = f"{cfg.path}" if cfg.path else f"{cfg.hf_id}"
    for lineno, row in rows:
        seen += 1
        if isinstance(row, dict) and cfg.source == "math" and not _keep_math_row(cfg, row):
            continue
        make = _gsm8k_problem if cfg.source == "gsm8k" else _math_problem
        problem = make(cfg, lineno, row) if isinstance(row, dict) else None
        if problem is None:
            bad.append(lineno)
            reason = reason or (
                row if isinstance(row, str) else "missing field or no extractable gold answer"
            )
        else:
            problems.append(problem)
    if not seen:
        raise DatasetError(f"dataset {cfg.name}: {where} has no rows (empty file)")
    if bad and not cfg.allow_malformed:
        raise DatasetError(
            f"dataset {cfg.name}: {len(bad)} malformed row(s) in {where} (first at line {bad[0]}: "
            f"{reason}); fix them or set dataset.allow_malformed=true"
        )
    if bad:
        print(
            f"dataset {cfg.name}: skipped {len(bad)} malformed row(s), first at line {bad[0]}",
            file=sys.stderr,
        )
    return problems


def select(problems: list[Problem], limit: int | None) -> list[Problem]:
    """``limit`` problems evenly spaced over the list (deterministic; keeps the level mix)."""
    if limit is None or limit >= len(problems):
        return problems
    return [problems[i * len(problems) // limit] for i in range(limit)]


def load_problems(cfg: DatasetConfig, limit: int | None = None) -> list[Problem]:
    """Load the problems of ``cfg`` (all, or ``limit`` evenly spaced ones).

    Raises:
        DatasetError: unknown source, missing file, hub unreachable, malformed rows.
    """
    if cfg.source == "synth":
        from harness.data import synth

        if cfg.path is not None:
            raise DatasetError(
                f"dataset.path={cfg.path}: dataset {cfg.name} is generated (synthetic), not read"
            )

        problems = synth.generate(cfg.difficulty, cfg.split, cfg.size, cfg.seed)
    elif cfg.source in ("gsm8k", "math"):
        problems = _parse(cfg, _rows(cfg))
    else:
        raise DatasetError(f"dataset.source={cfg.source}: unknown; use gsm8k, math or synth")
    if not problems:
        raise DatasetError(
            f"dataset {cfg.name}: no problems in {cfg.path or cfg.hf_id} match "
            "(check dataset.math_type / levels)"
        )
    return select(problems, limit)


def self_agreement(problems: list[Problem]) -> float:
    """Fraction of problems whose gold solution grades as correct against its gold answer."""
    hits = sum(grade(p.gold_solution, p.gold_answer, p.answer_style).correct for p in problems)
    return hits / len(problems)


@command(doc=__doc__)
def main(argv: list[str]) -> int:
    """Print problem counts and gold self-agreement for a configured dataset."""
    from harness.config import compose_config

    every_row = [] if any(arg.startswith("limit=") for arg in argv) else ["limit=null"]
    cfg = compose_config([*argv, *every_row])
    problems = load_problems(cfg.dataset, cfg.limit)
    by_difficulty = {p.difficulty for p in problems}
    print(f"dataset:   {cfg.dataset.name} ({', '.join(sorted(by_difficulty))})")
    print(f"problems:  {len(problems)}")
    print(f"agreement: {self_agreement(problems):.2%} (gold solution graded against gold answer)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
