"""The training-data pipeline: screening, judging, splitting, files, and the CLI."""

import json
from dataclasses import replace

import pytest
from fake_gemini import API_KEY, FakeGemini

from harness.config import ConfigError, compose_config
from harness.data import synth
from harness.data.problems import Problem
from train.config import experiments
from train.data import (
    DataLeakError,
    Outcome,
    build_difficulty,
    counts,
    judge,
    main,
    screen,
    split_of,
)
from train.data_config import compose_data_config
from train.formats import CodBounds
from train.teachers.base import Reply
from train.teachers.synthetic import SyntheticTeacher, solutions

BOUNDS = CodBounds(min_steps=1)
PROMPTS = dict(compose_config(["experiment=tiny"]).prompts)
SMALL = [f"datasets.{d}.train.size=40" for d in ("easy", "medium", "hard")]


def problem(
    pid="p1", question="Tom has 3 apples and buys 4 more. How many?", gold="7", style="number"
):
    return Problem(pid, "toy", "easy", question, gold, "3 + 4 = 7\n#### 7", style)


def stop(text, key="p1"):
    return Reply(key, text, "stop")


# ----------------------------------------------------------------------------- screening


def test_screen_drops_eval_questions_and_repeats_by_reason():
    eval_set = [problem("e1", "What is 2 + 2?")]
    problems = [
        problem("a", "Tom has 3 apples."),
        problem("b", "  tom HAS 3   apples. "),  # same question, other spacing and case
        problem("c", "What is 2 + 2?"),  # an evaluation question under a training id
        problem("e1", "Another text, evaluation id"),
        problem("a", "Different text, repeated id"),
    ]
    kept, dropped = screen(problems, eval_set)
    assert [p.id for p in kept] == ["a"]
    assert [(o.problem_id, o.reason) for o in dropped] == [
        ("b", "duplicate_question"),
        ("c", "eval_overlap"),
        ("e1", "eval_overlap"),
        ("a", "duplicate_question"),
    ]


# ----------------------------------------------------------------------------- judging


@pytest.mark.parametrize(
    ("reply", "style", "reason"),
    [
        (None, "cot", "cot_no_reply"),
        (Reply("p1", None, "error", error="quota"), "cot", "cot_teacher_error"),
        (Reply("p1", "1. 3+4", "length"), "cot", "cot_truncated"),
        (Reply("p1", None, "blocked"), "cod", "cod_blocked"),
        (stop("  \n"), "cot", "cot_empty"),
        (stop("1. 3 + 4 = 7"), "cot", "cot_no_final_answer"),
        (stop("1. 3 + 4 = <<3+4=7>>7\n#### 7"), "cot", "cot_calculator_tags"),
        (stop("1. 3 + 4 = 8\n#### 8"), "cot", "cot_wrong_answer"),
        (stop("1. 3 + 4 = 7\n#### 7"), "cot", None),
        (stop("a\nb\nc\nd\ne\nf\n#### 7"), "cod", "cod_too_many_steps"),
        (stop("three plus four makes seven apples\n#### 7"), "cod", "cod_step_too_long"),
        (stop("3+4=8\n#### 8"), "cod", "cod_wrong_answer"),
        (stop("3+4=7\n#### 7"), "cod", None),
    ],
)
def test_judge_names_the_drop_reason(reply, style, reason):
    assert judge(problem(), reply, style, BOUNDS)[0] == reason


def test_judge_records_answer_and_cod_format_even_when_dropping():
    reason, fields = judge(problem(), stop("a b c d e f\n#### 7"), "cod", BOUNDS)
    assert reason == "cod_step_too_long"
    assert fields == {
        "cod": "a b c d e f\n#### 7",
        "cod_answer": "7",
        "cod_correct": True,
        "cod_format": "step_too_long",
        "cod_steps": 1,
        "cod_longest_step": 6,
    }


def test_math_answers_are_graded_by_equivalence():
    p = problem(question="Simplify 2/4.", gold="\\frac{1}{2}", style="math")
    assert judge(p, stop("1. Divide both by 2.\n#### \\dfrac{1}{2}"), "cot", BOUNDS)[0] is None


# ----------------------------------------------------------------------------- splitting


def test_split_is_a_stable_hash_of_the_id():
    ids = [f"id-{i}" for i in range(2000)]
    splits = [split_of(i, 0.1) for i in ids]
    assert splits == [split_of(i, 0.1) for i in reversed(ids)][::-1]
    assert 0.08 < splits.count("val") / len(ids) < 0.12
    assert {split_of(i, 0.0) for i in ids} == {"train"}


# ----------------------------------------------------------------------------- one difficulty


class EditingTeacher(SyntheticTeacher):
    """The exact synthetic teacher with some outputs replaced, to exercise the drops."""

    def __init__(self, cot_edits, cod_edits):
        self.cot_edits, self.cod_edits = cot_edits, cod_edits

    def write_cot(self, problems):
        return {
            k: self.cot_edits.get(k, r)
            for k, r in super().write_cot(problems).items()
            if self.cot_edits.get(k, r)
        }

    def write_cod(self, problems, cots):
        return {k: self.cod_edits.get(k, r) for k, r in super().write_cod(problems, cots).items()}


def test_build_difficulty_counts_every_drop_and_writes_aligned_sets():
    problems = synth.generate("medium", "train", 30, seed=0)
    evals = synth.generate("medium", "test", 10, seed=0)
    ids = [p.id for p in problems]
    teacher = EditingTeacher(
        cot_edits={ids[0]: stop("1. guess\n#### 99999", ids[0]), ids[1]: None},
        cod_edits={ids[2]: stop("\n".join(["x"] * 6) + "\n#### 1", ids[2])},
    )
    problems = [*problems, replace(problems[3], id="dup"), evals[0]]
    data = build_difficulty("medium", problems, evals, teacher, BOUNDS, PROMPTS, val_fraction=0.2)
    c = counts(data)
    assert c["dropped"] == {
        "cod_too_many_steps": 1,
        "cot_no_reply": 1,
        "cot_wrong_answer": 1,
        "duplicate_question": 1,
        "eval_overlap": 1,
    }
    assert (c["problems"], c["sent_to_teacher"], c["kept"]) == (32, 30, 27)
    assert c["train"] + c["val"] == 27
    assert c["teacher_accuracy"] == pytest.approx(28 / 30)
    assert c["cod_compliance"] == pytest.approx(27 / 28)
    for split in ("train", "val"):
        cot, cod = data.examples[f"cot_{split}"], data.examples[f"cod_{split}"]
        assert [e["id"] for e in cot] == [e["id"] for e in cod]
        assert all(e["prompt"][0]["content"] == PROMPTS["cot"] for e in cot)
        assert all(e["prompt"][0]["content"] == PROMPTS["cod"] for e in cod)
    kept = [o for o in data.outcomes if o.kept]
    assert all(o.split == split_of(o.problem_id, 0.2) for o in kept)


def test_a_leaked_evaluation_id_stops_the_build(monkeypatch):
    problems = synth.generate("easy", "train", 5, seed=0)
    monkeypatch.setattr("train.data.screen", lambda ps, evals: (list(ps), []))  # a broken screen
    with pytest.raises(DataLeakError, match=problems[0].id):
        build_difficulty("easy", problems, problems[:1], SyntheticTeacher(), BOUNDS, PROMPTS, 0.1)


def test_outcome_rows_are_flat():
    row = Outcome("p", "kept", "train", "c", "d").to_row()
    assert row["problem_id"] == "p" and row["split"] == "train" and "kept" not in row


# ----------------------------------------------------------------------------- the CLI


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tiny_experiment_builds_every_difficulty_offline(tmp_path):
    assert main(["experiment=tiny", f"out_dir={tmp_path}", *SMALL]) == 0
    eval_ids = {p.id for p in synth.generate("hard", "test", 200, seed=0)}
    for difficulty in ("easy", "medium", "hard"):
        out = tmp_path / "tiny" / difficulty
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["teacher"] == "synthetic"
        assert manifest["counts"]["kept"] == 40
        assert manifest["counts"]["cod_compliance"] == 1.0
        train = read_jsonl(out / "cot_train.jsonl")
        assert len(train) == manifest["counts"]["train"]
        assert len(read_jsonl(out / "cod_val.jsonl")) == manifest["counts"]["val"]
        example = read_jsonl(out / "cod_train.jsonl")[0]
        assert [m["role"] for m in example["prompt"]] == ["system", "user"]
        assert example["completion"][0]["role"] == "assistant"
        assert example["completion"][0]["content"].splitlines()[-1].startswith("#### ")
        assert not {e["id"] for e in train} & eval_ids
        cot_chars = sum(len(e["completion"][0]["content"]) for e in train)
        cod_chars = sum(
            len(e["completion"][0]["content"]) for e in read_jsonl(out / "cod_train.jsonl")
        )
        assert cod_chars < 0.5 * cot_chars


def test_rebuild_is_byte_identical(tmp_path):
    for run in ("a", "b"):
        assert main(["experiment=tiny", f"out_dir={tmp_path / run}", *SMALL]) == 0
    for name in ("cot_train.jsonl", "cod_val.jsonl", "records.jsonl", "manifest.json"):
        assert (tmp_path / "a/tiny/easy" / name).read_bytes() == (
            tmp_path / "b/tiny/easy" / name
        ).read_bytes()


@pytest.mark.parametrize("experiment", experiments("data"))
def test_every_data_experiment_composes(experiment):
    cfg = compose_data_config([f"experiment={experiment}"])
    gsm8k_only = experiment == "smollm2"  # teacher=gsm8k: MATH has no calculator annotations
    assert set(cfg.datasets) == ({"easy"} if gsm8k_only else {"easy", "medium", "hard"})
    for source in cfg.datasets.values():
        assert (source.train.split, source.eval.split) == ("train", "test")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["experiment=nope"], "experiment=nope: no conf/data/nope.yaml"),
        (["teacher=oracle"], "teacher=oracle: must be one of synthetic, gemini, vllm"),
        (["val_fraction=1.0"], r"val_fraction=1.0: must be in \[0, 1\)"),
        (["experiment=qwen2.5", "teacher=synthetic"], "only solves synth datasets, not gsm8k"),
        (["teacher=vllm"], "vllm.model=None: required for teacher=vllm"),
        (
            ["datasets.easy.train.split=test"],
            "datasets.easy.train.split=test: train and eval read the same split",
        ),
        (["prompts.cod_user=$nope"], r"prompts.cod_user: bad placeholder 'nope'"),
        (["cod.min_steps=6"], "min_steps=6, max_steps=5"),
    ],
)
def test_bad_data_config_is_one_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose_data_config(overrides)


def test_cli_prints_one_error_line_for_bad_config(capsys):
    assert main(["teacher=oracle"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "error: teacher=oracle: must be one of synthetic, gemini, vllm, gsm8k"
    )


def test_gemini_teacher_builds_the_same_sets_through_the_batch_api(tmp_path, monkeypatch):
    """The whole pipeline with teacher=gemini against the fake server answering exactly."""
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)
    problems = {p.id: p for p in synth.generate("easy", "train", 40, seed=0)}

    def answer(key, request):
        cot, cod = solutions(problems[key])
        return cod if "Chain of thought:" in request["contents"][0]["parts"][0]["text"] else cot

    only_easy = ["~datasets.medium", "~datasets.hard", "datasets.easy.train.size=40"]
    with FakeGemini(answer) as fake:
        args = [
            "teacher=gemini",
            "confirm=true",
            f"gemini.base_url={fake.url}",
            "gemini.poll_initial_s=0.001",
        ]
        assert main(["experiment=tiny", f"out_dir={tmp_path / 'g'}", *args, *only_easy]) == 0
        assert len(fake.jobs) == 2  # one CoT job, one CoD job
    assert main(["experiment=tiny", f"out_dir={tmp_path / 's'}", *only_easy]) == 0
    gemini, exact = tmp_path / "g/tiny/easy", tmp_path / "s/tiny/easy"
    for name in ("cot_train.jsonl", "cod_train.jsonl", "cod_val.jsonl"):
        assert (gemini / name).read_text() == (exact / name).read_text()
    manifest = json.loads((gemini / "manifest.json").read_text())
    assert (manifest["teacher"], manifest["model"]) == ("gemini", "gemini-2.5-flash")
    assert manifest["counts"]["teacher_input_tokens"] == 50 * 80
