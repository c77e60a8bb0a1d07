"""The GSM8K teacher: CoT and CoD from hand-written rows in GSM8K's train format."""

import json

import pytest

from harness.config import ConfigError
from harness.data.problems import Problem
from train.data import main
from train.data_config import compose_data_config
from train.formats import check_cot
from train.teachers.gsm8k import equation, solutions


def row(question: str, *steps: str, answer: str) -> dict[str, str]:
    return {"question": question, "answer": "\n".join([*steps, f"#### {answer}"])}


PENS = row(
    "A shop had 48 boxes in April and half as many in May. Each box holds 50 pens. How many pens?",
    "The shop had 48/2 = <<48/2=24>>24 boxes in May.",
    "It had 48+24 = <<48+24=72>>72 boxes in all.",
    "",
    "So it had 72 x 50 = <<72*50=3600>>3,600   pens.",
    answer="3,600",
)
TWO_STEPS = row(
    "Natalia sold clips to 48 friends in April and half as many in May. How many in all?",
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.",
    answer="72",
)
SIX_STEPS = row(
    "Ben doubles 1 six times. What does he get?",
    *(f"Step: {2**i}*2 = <<{2**i}*2={2 ** (i + 1)}>>{2 ** (i + 1)}." for i in range(6)),
    answer="64",
)
NO_TAGS = row(
    "Mia has 3 cats and 4 dogs. How many pets?",
    "She has 3 + 4 = 7 pets.",
    answer="7",
)
IN_TEST = row(
    "A bus carries 10 people, 3 leave, 5 board, then 2 leave. How many remain?",
    "After 3 leave: 10-3 = <<10-3=7>>7.",
    "After 5 board: 7+5 = <<7+5=12>>12.",
    "After 2 leave: 12-2 = <<12-2=10>>10.",
    "Then 10*1 = <<10*1=10>>10 remain.",
    answer="10",
)
FIVE_STEPS = row(
    "Ann buys 4 packs of 6 eggs, uses 5, gets 3 more and splits them between 2 days. "
    "How many eggs per day, plus 1 spare?",
    "She buys 4*6 = <<4*6=24>>24 eggs.",
    "She has 24-5 = <<24-5=19>>19 left.",
    "Then 19+3 = <<19+3=22>>22 eggs.",
    "Per day 22/2 = <<22/2=11>>11 eggs.",
    "With the spare 11+1 = <<11+1=12>>12.",
    answer="12",
)


def test_cot_drops_annotations_and_cod_keeps_the_equations():
    problem = Problem("p", "gsm8k", "easy", PENS["question"], "3600", PENS["answer"])
    cot, cod = solutions(problem)
    assert cot == (
        "1. The shop had 48/2 = 24 boxes in May.\n"
        "2. It had 48+24 = 72 boxes in all.\n"
        "3. So it had 72 x 50 = 3,600 pens.\n"
        "#### 3600"
    )
    assert cod == "48/2 = 24\n48+24 = 72\n72*50 = 3600\n#### 3600"
    assert check_cot(cot).ok


def test_equation_spacing_is_fixed_whatever_the_annotation_has():
    assert equation(" 100 - 50 - 30 =20 ") == "100-50-30 = 20"
    assert equation("12") == "12"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_smollm2_builds_gsm8k_sets_and_counts_the_cod_drops(tmp_path):
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    write_jsonl(
        datasets / "gsm8k_train.jsonl", [PENS, TWO_STEPS, SIX_STEPS, NO_TAGS, IN_TEST, FIVE_STEPS]
    )
    write_jsonl(datasets / "gsm8k_test.jsonl", [IN_TEST])
    out = tmp_path / "data"
    assert main(["experiment=smollm2", f"datasets_dir={datasets}", f"out_dir={out}"]) == 0
    easy = out / "smollm2" / "easy"
    assert sorted(p.name for p in (out / "smollm2").iterdir()) == ["easy"]
    manifest = json.loads((easy / "manifest.json").read_text())
    assert (manifest["teacher"], manifest["dataset"]) == ("gsm8k", "gsm8k")
    c = manifest["counts"]
    assert (c["problems"], c["sent_to_teacher"], c["kept"]) == (6, 5, 2)
    assert c["dropped"] == {"cod_too_few_steps": 2, "cod_too_many_steps": 1, "eval_overlap": 1}
    assert c["teacher_accuracy"] == 1.0
    examples = {
        style: [
            json.loads(line)
            for split in ("train", "val")
            for line in (easy / f"{style}_{split}.jsonl").read_text().splitlines()
        ]
        for style in ("cot", "cod")
    }
    assert [e["id"] for e in examples["cot"]] == [e["id"] for e in examples["cod"]]
    assert {e["id"] for e in examples["cod"]} == {"gsm8k-train-00001", "gsm8k-train-00006"}
    cods = {e["completion"][0]["content"] for e in examples["cod"]}
    assert "48/2 = 24\n48+24 = 72\n72*50 = 3600\n#### 3600" in cods
    assert all("<<" not in e["completion"][0]["content"] for e in examples["cot"])


def test_gsm8k_teacher_refuses_math_datasets():
    with pytest.raises(
        ConfigError, match="teacher=gsm8k: the gsm8k teacher only solves gsm8k datasets, not math_"
    ):
        compose_data_config(["experiment=qwen2.5", "teacher=gsm8k"])
