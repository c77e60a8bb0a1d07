"""Training data: problems -> teacher CoT -> CoD summaries -> cleaning -> SFT sets.

    python -m train.data experiment=tiny             # offline: synthetic teacher, seconds
    python -m train.data experiment=smollm2 datasets_dir=path/to/datasets  # GSM8K's own solutions
    python -m train.data experiment=qwen2.5 confirm=true \\
        datasets.easy.train.path=gsm8k_train.jsonl datasets.easy.eval.path=gsm8k_test.jsonl ...
    python -m train.data experiment=qwen2.5 teacher=vllm vllm.model=Qwen/Qwen2.5-72B-Instruct
    python -m train.data cancel data/qwen2.5/easy/teacher/cot/state.json experiment=qwen2.5

Writes ``<out_dir>/<experiment>/<difficulty>/``; what is kept and dropped: docs/EXPERIMENTS.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.checks import command
from harness.config import ConfigError, compose_config
from harness.data.datasets import load_problems
from harness.data.grading import grade
from harness.data.problems import Problem
from harness.data.prompts import build_messages
from harness.files import json_digest, write_text
from train.data_config import DataConfig, SourceConfig, compose_data_config
from train.formats import CodBounds, Verdict, check_cod, check_cot
from train.teachers.base import Reply, Teacher
from train.teachers.gemini import TeacherError, cancel_jobs

STYLES = ("cot", "cod")
SPLITS = ("train", "val")


class DataLeakError(RuntimeError):
    """An evaluation problem ended up in a training set."""


class StageError(RuntimeError):
    """A teacher stage kept too little of what it was sent to the teacher."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one training problem (a row of ``records.jsonl``)."""

    problem_id: str
    reason: str  # "kept" or the drop reason
    split: str | None = None  # train | val when kept
    cot: str | None = None
    cod: str | None = None
    cot_answer: str | None = None  # the teacher's final answer
    cot_correct: bool | None = None
    cod_answer: str | None = None
    cod_correct: bool | None = None
    cod_format: str | None = None  # CoD verdict: "ok" when compliant, else the broken rule
    cod_steps: int | None = None
    cod_longest_step: int | None = None

    @property
    def kept(self) -> bool:
        return self.reason == "kept"

    def to_row(self) -> dict[str, object]:
        return asdict(self)


# ----------------------------------------------------------------------------- pure steps


def normalize_question(text: str) -> str:
    """Case- and whitespace-insensitive form of a question, for duplicate checks."""
    return " ".join(text.lower().split())


def screen(
    problems: Sequence[Problem], eval_problems: Sequence[Problem]
) -> tuple[list[Problem], list[Outcome]]:
    """Drop evaluation problems (same id or same question) and repeated questions."""
    eval_ids = {p.id for p in eval_problems}
    eval_questions = {normalize_question(p.question) for p in eval_problems}
    seen_ids: set[str] = set()
    seen_questions: set[str] = set()
    kept, dropped = [], []
    for problem in problems:
        question = normalize_question(problem.question)
        if problem.id in eval_ids or question in eval_questions:
            dropped.append(Outcome(problem.id, "eval_overlap"))
        elif problem.id in seen_ids or question in seen_questions:
            dropped.append(Outcome(problem.id, "duplicate_question"))
        else:
            seen_ids.add(problem.id)
            seen_questions.add(question)
            kept.append(problem)
    return kept, dropped


def reply_problem(reply: Reply | None) -> str | None:
    """Why a reply has no usable text (None when it has)."""
    if reply is None:
        return "no_reply"
    if reply.finish_reason == "error":
        return "teacher_error"
    if reply.finish_reason == "blocked":
        return "blocked"
    if reply.finish_reason == "length":
        return "truncated"
    if not (reply.text or "").strip():
        return "empty"
    return None


def judge(
    problem: Problem, reply: Reply | None, style: str, bounds: CodBounds
) -> tuple[str | None, dict]:
    """(drop reason or None, outcome fields) for one teacher output of ``style``."""
    problem_reason = reply_problem(reply)
    if problem_reason is not None:
        return f"{style}_{problem_reason}", {}
    text = reply.text.strip()  # type: ignore[union-attr]
    verdict: Verdict = check_cot(text) if style == "cot" else check_cod(text, bounds)
    graded = grade(text, problem.gold_answer, problem.answer_style)
    fields: dict[str, object] = {
        style: text,
        f"{style}_answer": graded.pred_answer,
        f"{style}_correct": graded.correct,
    }
    if style == "cod":
        fields |= {
            "cod_format": verdict.reason,
            "cod_steps": verdict.steps,
            "cod_longest_step": verdict.longest_step,
        }
    if not verdict.ok:
        return f"{style}_{verdict.reason}", fields
    if not graded.correct:
        return f"{style}_wrong_answer", fields
    return None, fields


def split_of(problem_id: str, val_fraction: float) -> str:
    """``val`` for a fixed ``val_fraction`` share of ids (a hash, independent of the set)."""
    bucket = int(hashlib.sha256(problem_id.encode()).hexdigest()[:8], 16) / 2**32
    return "val" if bucket < val_fraction else "train"


def sft_example(
    problem: Problem, completion: str, style: str, prompts: Mapping[str, str]
) -> dict[str, object]:
    """One TRL conversational prompt-completion example."""
    return {
        "id": problem.id,
        "prompt": build_messages(problem, style, prompts),
        "completion": [{"role": "assistant", "content": completion}],
    }


# ----------------------------------------------------------------------------- one difficulty


@dataclass(frozen=True)
class DifficultyData:
    """The outcome of every problem of one difficulty and the SFT examples kept."""

    difficulty: str
    outcomes: list[Outcome]
    examples: dict[str, list[dict[str, object]]]  # "cot_train", "cod_val", ...
    replies: list[Reply]  # every teacher reply, for token usage


def build_difficulty(
    difficulty: str,
    problems: Sequence[Problem],
    eval_problems: Sequence[Problem],
    teacher: Teacher,
    bounds: CodBounds,
    system_prompts: Mapping[str, str],
    val_fraction: float,
    min_kept_share: float = 0.0,
) -> DifficultyData:
    """Screen, ask the teacher for CoT then CoD, judge, split and build SFT examples.

    Raises:
        StageError: a stage kept less than ``min_kept_share`` of its requests (see
            :func:`check_stage`).
        DataLeakError: a kept example whose id belongs to the evaluation split.
    """
    candidates, outcomes = screen(problems, eval_problems)
    cot_replies = teacher.write_cot(candidates)
    after_cot: list[tuple[Problem, dict]] = []
    for problem in candidates:
        reason, fields = judge(problem, cot_replies.get(problem.id), "cot", bounds)
        if reason is None:
            after_cot.append((problem, fields))
        else:
            outcomes.append(Outcome(problem.id, reason, **fields))
    check_stage(f"{difficulty} cot", len(candidates), outcomes, cot_replies, min_kept_share)
    cots = {p.id: fields["cot"] for p, fields in after_cot}
    cod_replies = teacher.write_cod([p for p, _ in after_cot], cots) if after_cot else {}
    examples: dict[str, list[dict[str, object]]] = {
        f"{s}_{split}": [] for s in STYLES for split in SPLITS
    }
    for problem, cot_fields in after_cot:
        reason, cod_fields = judge(problem, cod_replies.get(problem.id), "cod", bounds)
        outcome = Outcome(problem.id, reason or "kept", **cot_fields, **cod_fields)
        if outcome.kept:
            outcome = replace(outcome, split=split_of(problem.id, val_fraction))
            for style in STYLES:
                text = getattr(outcome, style)
                examples[f"{style}_{outcome.split}"].append(
                    sft_example(problem, text, style, system_prompts)
                )
        outcomes.append(outcome)
    check_stage(f"{difficulty} cod", len(after_cot), outcomes, cod_replies, min_kept_share)
    eval_ids = {p.id for p in eval_problems}
    leaked = sorted({str(ex["id"]) for rows in examples.values() for ex in rows} & eval_ids)
    if leaked:
        raise DataLeakError(
            f"{difficulty}: evaluation problems in the training data: {', '.join(leaked[:5])}"
        )
    replies = [*cot_replies.values(), *cod_replies.values()]
    return DifficultyData(
        difficulty, sorted(outcomes, key=lambda o: o.problem_id), examples, replies
    )


def check_stage(
    stage: str,
    sent: int,
    outcomes: Sequence[Outcome],
    replies: Mapping[str, Reply],
    min_kept_share: float,
) -> None:
    """Fail a stage (``"<difficulty> <style>"``) that kept nothing or under the share.

    A share of 0 never fails. Raises:
        StageError: one line with the kept count, drop reasons and the top teacher error.
    """
    style = stage.split()[-1]
    dropped = Counter(o.reason for o in outcomes if o.reason.startswith(f"{style}_"))
    kept = sent - sum(dropped.values())
    if min_kept_share == 0 or sent == 0 or (kept > 0 and kept >= min_kept_share * sent):
        return
    reasons = ", ".join(f"{reason} {n}" for reason, n in dropped.most_common())
    errors = Counter(r.error for r in replies.values() if r.error).most_common(1)
    why = f"; most common teacher error: {errors[0][0]}" if errors else ""
    raise StageError(
        f"{stage}: kept {kept} of {sent} (min_kept_share={min_kept_share}); dropped: {reasons}{why}"
    )


def counts(data: DifficultyData) -> dict[str, object]:
    """Kept / dropped by reason, train / val sizes, teacher accuracy and CoD compliance."""
    outcomes = data.outcomes
    screened = {"eval_overlap", "duplicate_question"}
    sent = [o for o in outcomes if o.reason not in screened]
    cod_written = [o for o in outcomes if o.cod_format is not None]
    usage = [r for r in data.replies if r.output_tokens is not None]
    return {
        "problems": len(outcomes),
        "sent_to_teacher": len(sent),
        "kept": sum(o.kept for o in outcomes),
        "train": len(data.examples["cot_train"]),
        "val": len(data.examples["cot_val"]),
        "dropped": dict(sorted(Counter(o.reason for o in outcomes if not o.kept).items())),
        "teacher_accuracy": _ratio(sum(bool(o.cot_correct) for o in sent), len(sent)),
        "cod_accuracy": _ratio(sum(bool(o.cod_correct) for o in cod_written), len(cod_written)),
        "cod_compliance": _ratio(sum(o.cod_format == "ok" for o in cod_written), len(cod_written)),
        "teacher_input_tokens": sum(r.input_tokens or 0 for r in usage),
        "teacher_output_tokens": sum(r.output_tokens or 0 for r in usage),
    }


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


# ----------------------------------------------------------------------------- files


def _jsonl(rows: Sequence[Mapping[str, object]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_difficulty(out: Path, data: DifficultyData, manifest: Mapping[str, object]) -> Path:
    """Write the SFT sets, ``records.jsonl`` and ``manifest.json`` (with the data hash)."""
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    for name, rows in sorted(data.examples.items()):
        text = _jsonl(rows)
        write_text(out / f"{name}.jsonl", text)
        digest.update(f"{name}\n{text}".encode())
    write_text(out / "records.jsonl", _jsonl([o.to_row() for o in data.outcomes]))
    full = {**manifest, "data_hash": digest.hexdigest()[:16], "counts": counts(data)}
    write_text(out / "manifest.json", json.dumps(full, indent=2, ensure_ascii=False) + "\n")
    return out


def prompts_hash(cfg: DataConfig, system_prompts: Mapping[str, str]) -> str:
    """Hash of everything that shapes the texts: teacher templates, SFT system prompts, bounds."""
    return json_digest(
        {
            "teacher": cfg.teacher_prompts().digest(),
            "system": {s: system_prompts[s] for s in STYLES},
            "cod": asdict(cfg.cod),
        }
    )


def make_teacher(cfg: DataConfig, work_dir: Path, difficulty: str) -> Teacher:
    """The configured teacher; Gemini checkpoints under ``work_dir``."""
    if cfg.teacher == "synthetic":
        from train.teachers.synthetic import SyntheticTeacher

        return SyntheticTeacher()
    if cfg.teacher == "gsm8k":
        from train.teachers.gsm8k import Gsm8kTeacher

        return Gsm8kTeacher()
    if cfg.teacher == "gemini":
        from train.teachers.gemini import GeminiTeacher

        return GeminiTeacher(
            cfg.gemini,
            cfg.teacher_prompts(),
            cfg.cod,
            work_dir,
            confirm=cfg.confirm,
            label=f"{cfg.experiment}-{difficulty}",
        )
    from train.teachers.vllm_teacher import VllmTeacher

    return VllmTeacher(cfg.vllm, cfg.teacher_prompts(), cfg.cod)


def manifest_of(
    cfg: DataConfig,
    difficulty: str,
    source: SourceConfig,
    teacher: Teacher,
    system_prompts: Mapping[str, str],
) -> dict[str, object]:
    return {
        "experiment": cfg.experiment,
        "difficulty": difficulty,
        "dataset": source.train.name,
        "train_split": source.train.split,
        "eval_split": source.eval.split,
        "teacher": teacher.name,
        "model": teacher.model,
        "prompts_hash": prompts_hash(cfg, system_prompts),
        "teacher_prompts_hash": cfg.teacher_prompts().digest(),
        "cod_bounds": asdict(cfg.cod),
        "val_fraction": cfg.val_fraction,
        "limit": cfg.limit,
    }


def run(cfg: DataConfig) -> dict[str, Path]:
    """Build every difficulty of ``cfg``; returns the output directory per difficulty."""
    system_prompts = dict(compose_config([f"experiment={cfg.experiment}"]).prompts)
    outputs = {}
    for difficulty, source in cfg.datasets.items():
        out = Path(cfg.out_dir) / cfg.experiment / difficulty
        problems = load_problems(source.train, cfg.limit)
        eval_problems = load_problems(source.eval)
        teacher = make_teacher(cfg, out / "teacher", difficulty)
        data = build_difficulty(
            difficulty,
            problems,
            eval_problems,
            teacher,
            cfg.cod,
            system_prompts,
            cfg.val_fraction,
            cfg.min_kept_share,
        )
        outputs[difficulty] = write_difficulty(
            out, data, manifest_of(cfg, difficulty, source, teacher, system_prompts)
        )
        print(format_counts(difficulty, counts(data)), flush=True)
    return outputs


def format_counts(difficulty: str, c: Mapping[str, object]) -> str:
    dropped = ", ".join(f"{k} {v}" for k, v in c["dropped"].items()) or "none"  # type: ignore[union-attr]
    accuracy = c["teacher_accuracy"]
    acc = f"{accuracy:.1%}" if isinstance(accuracy, float) else "n/a"
    return (
        f"{difficulty}: {c['problems']} problems -> {c['train']} train + {c['val']} val "
        f"(teacher accuracy {acc}; dropped: {dropped})"
    )


@command(TeacherError, DataLeakError, StageError, doc=__doc__)
def main(argv: list[str]) -> int:
    if argv[:1] == ["cancel"]:  # cancel <state.json> [overrides]: stop a stage's Gemini jobs
        if len(argv) < 2:
            raise ConfigError("cancel: name a checkpoint (<teacher dir>/<stage>/state.json)")
        for line in cancel_jobs(Path(argv[1]), compose_data_config(argv[2:]).gemini):
            print(line)
    else:
        run(compose_data_config(argv))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("train").setLevel(logging.INFO)
    sys.exit(main(sys.argv[1:]))
