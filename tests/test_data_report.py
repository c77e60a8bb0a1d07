"""The training-data report: length statistics, markdown tables and figures."""

import json

import pytest

from harness.data import synth
from train import data, data_report
from train.data_report import DifficultyReport, length_stats, render_markdown
from train.teachers.synthetic import solutions
from train.tokenizer import build_tokenizer


def test_length_stats_are_exact_on_a_small_sample():
    s = length_stats([10, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert (s.n, s.mean, s.median, s.p90, s.max) == (10, 5.5, 5.5, 9.0, 10)
    assert length_stats([]).n == 0


def manifest(dropped, kept=8):
    counts = {
        "problems": kept + sum(dropped.values()),
        "sent_to_teacher": kept + sum(dropped.values()),
        "kept": kept,
        "train": kept - 1,
        "val": 1,
        "dropped": dropped,
        "teacher_accuracy": 0.9,
        "cod_accuracy": None,
        "cod_compliance": 0.75,
    }
    return {"teacher": "gemini", "model": "m", "dataset": "toy", "counts": counts}


def test_markdown_has_overview_lengths_ratio_and_drops():
    reports = [
        DifficultyReport(
            "easy", manifest({"cot_wrong_answer": 2}), {"cot": [100, 200], "cod": [30, 30]}
        ),
        DifficultyReport("hard", manifest({"cod_step_too_long": 1}), {"cot": [400], "cod": [100]}),
    ]
    text = render_markdown("exp", "tok", reports)
    assert "| easy | toy | 10 | 10 | 8 | 7 | 1 | 90.0% | n/a | 75.0% |" in text
    assert "| easy | cod | 2 | 30.0 | 30.0 | 30 | 30 | 0.20 |" in text
    assert "| hard | cot | 1 | 400.0 | 400.0 | 400 | 400 |  |" in text
    assert "| cod_step_too_long | 0 | 1 |" in text
    assert "| cot_wrong_answer | 2 | 0 |" in text


def test_report_cli_writes_markdown_and_figures_showing_cod_shorter(tmp_path):
    sizes = [f"datasets.{d}.train.size=60" for d in ("easy", "medium", "hard")]
    assert data.main(["experiment=tiny", f"out_dir={tmp_path}", *sizes]) == 0
    problems = synth.generate("hard", "train", 100, seed=1)
    build_tokenizer(
        [t for p in problems for t in (p.question, *solutions(p))], 300, tmp_path / "tok"
    )
    assert (
        data_report.main(
            ["experiment=tiny", f"out_dir={tmp_path}", f"tokenizer={tmp_path / 'tok'}"]
        )
        == 0
    )
    out = tmp_path / "tiny" / "report"
    assert (out / "lengths.png").stat().st_size > 10_000
    assert (out / "drops.png").stat().st_size > 5_000
    rows = [line for line in (out / "REPORT.md").read_text().splitlines() if "| cod |" in line]
    assert len(rows) == 3
    ratios = [float(row.split("|")[-2]) for row in rows]
    assert all(0 < r < 0.5 for r in ratios), ratios


def test_report_cli_names_a_missing_tokenizer(tmp_path, capsys):
    sizes = [f"datasets.{d}.train.size=5" for d in ("easy", "medium", "hard")]
    assert data.main(["experiment=tiny", f"out_dir={tmp_path}", *sizes]) == 0
    assert (
        data_report.main(
            ["experiment=tiny", f"out_dir={tmp_path}", f"tokenizer={tmp_path / 'none'}"]
        )
        == 2
    )
    assert "pass tokenizer=<model dir or hub id>" in capsys.readouterr().err


def test_report_cli_refuses_before_the_data_exists(tmp_path, capsys):
    assert data_report.main(["experiment=tiny", f"out_dir={tmp_path}"]) == 2
    assert "run python -m train.data first" in capsys.readouterr().err


def test_cod_to_cot_ratio_is_the_ratio_of_mean_lengths():
    r = DifficultyReport("easy", manifest({}), {"cot": [4, 6], "cod": [1, 3]})
    assert (r.stats("cot").mean, r.stats("cod").mean) == (5.0, 2.0)
    assert r.ratio() == pytest.approx(0.4)
    assert DifficultyReport("easy", manifest({}), {"cot": [], "cod": []}).ratio() is None


def test_completions_keep_texts_whose_prompt_holds_a_unicode_line_separator(tmp_path):
    row = {
        "prompt": [{"role": "user", "content": "a\u2028b"}],
        "completion": [{"content": "#### 1"}],
    }
    path = tmp_path / "cot_train.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert data_report.completions(path) == ["#### 1"]
