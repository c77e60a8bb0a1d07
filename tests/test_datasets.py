"""Dataset loaders on small local files in the original formats."""

import json
import re

import pytest

from harness.config import DatasetConfig, compose_config
from harness.data.datasets import DatasetError, load_problems, select, self_agreement

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A box holds 1,200 pens. Half are sold.", "answer": "1200/2=600\n#### 1,200"},
]
MATH_ROWS = [
    {
        "problem": "Solve x+1=2.",
        "solution": "So $x=\\boxed{1}$.",
        "level": "Level 1",
        "type": "Algebra",
    },
    {
        "problem": "Find y.",
        "solution": "$y=\\boxed{\\frac{1}{2}}$",
        "level": "Level 2",
        "type": "Algebra",
    },
    {"problem": "Too hard.", "solution": "\\boxed{3}", "level": "Level 5", "type": "Algebra"},
    {"problem": "Other.", "solution": "\\boxed{4}", "level": "Level 1", "type": "Geometry"},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def dataset(**kw) -> DatasetConfig:
    return DatasetConfig(**{"name": "t", "difficulty": "easy", **kw})


def test_gsm8k_gold_answer_is_the_number_after_hashes(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS)
    problems = load_problems(dataset(source="gsm8k", path=str(path)))
    assert [p.gold_answer for p in problems] == ["7", "1200"]
    assert problems[0].id == "gsm8k-test-00001"
    assert problems[0].answer_style == "number"
    assert self_agreement(problems) == 1.0


def test_math_filters_type_and_level_and_takes_last_boxed(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", MATH_ROWS)
    cfg = dataset(source="math", path=str(path), math_type="Algebra", levels=[1, 2])
    problems = load_problems(cfg)
    assert [p.gold_answer for p in problems] == ["1", "\\frac{1}{2}"]
    assert all(p.answer_style == "math" for p in problems)


def test_malformed_row_is_refused_with_its_line_number(tmp_path):
    path = write_jsonl(
        tmp_path / "g.jsonl", [GSM8K_ROWS[0], {"question": "q", "answer": "no hashes"}]
    )
    with pytest.raises(
        DatasetError, match=r"1 malformed row\(s\).*first at line 2.*allow_malformed"
    ):
        load_problems(dataset(source="gsm8k", path=str(path)))


def test_malformed_rows_are_skipped_when_the_user_opts_in(tmp_path, capsys):
    path = write_jsonl(tmp_path / "g.jsonl", [GSM8K_ROWS[0], {"question": "q"}])
    (tmp_path / "g.jsonl").write_text(path.read_text() + "not json\n")
    problems = load_problems(dataset(source="gsm8k", path=str(path), allow_malformed=True))
    assert len(problems) == 1
    assert "skipped 2 malformed row(s), first at line 2" in capsys.readouterr().err


def test_missing_local_file_names_the_path(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset\.path=.*nope\.jsonl: no such file"):
        load_problems(dataset(source="gsm8k", path=str(tmp_path / "nope.jsonl")))


def test_unreachable_hub_says_what_to_set(monkeypatch):
    import datasets
    from huggingface_hub import constants

    # offline however the process started (the libraries read these variables on import)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    cfg = dataset(source="gsm8k", hf_id="draftbench-test/does-not-exist", hf_config="main")
    with pytest.raises(DatasetError, match=r"set dataset\.path="):
        load_problems(cfg)


def test_a_path_that_cannot_be_read_as_problems_says_why(tmp_path):
    with pytest.raises(
        DatasetError, match=rf"dataset\.path={re.escape(str(tmp_path))}: a directory; name one"
    ):
        load_problems(dataset(source="gsm8k", path=str(tmp_path)))
    synthetic = dataset(name="synth_easy", source="synth", path=str(tmp_path / "x.jsonl"))
    with pytest.raises(
        DatasetError, match=r"dataset synth_easy is generated \(synthetic\), not read"
    ):
        load_problems(synthetic)


def test_limit_spreads_evenly_and_keeps_order():
    assert select(list(range(10)), 3) == [0, 3, 6]
    assert select(list(range(4)), None) == [0, 1, 2, 3]
    assert select(list(range(4)), 9) == [0, 1, 2, 3]


@pytest.mark.parametrize("name", ["synth_easy", "synth_medium", "synth_hard"])
def test_synth_datasets_load_through_the_config(name):
    cfg = compose_config([f"dataset={name}"])
    problems = load_problems(cfg.dataset, limit=20)
    assert len(problems) == 20
    assert {p.dataset for p in problems} == {name}
    assert self_agreement(problems) == 1.0


def test_datasets_dir_points_every_real_dataset_at_its_conventional_file(tmp_path):
    write_jsonl(tmp_path / "gsm8k_train.jsonl", GSM8K_ROWS)
    write_jsonl(tmp_path / "math_algebra_l1-2_test.jsonl", MATH_ROWS)
    gsm8k = compose_config(["dataset=gsm8k", "dataset.split=train", f"datasets_dir={tmp_path}"])
    assert gsm8k.dataset.path == str(tmp_path / "gsm8k_train.jsonl")
    assert len(load_problems(gsm8k.dataset)) == 2
    algebra = compose_config(["dataset=math_algebra_l12", f"datasets_dir={tmp_path}"])
    assert [p.gold_answer for p in load_problems(algebra.dataset)] == ["1", "\\frac{1}{2}"]
    assert compose_config(["dataset=gsm8k"]).dataset.path is None  # no folder: the hub
