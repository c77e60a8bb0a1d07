"""bench/instances.py: one fixed request timed in fresh engine instances, on real engines."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import instances as bench


@pytest.mark.slow  # real engines
def test_each_instance_times_the_same_request_and_the_table_gets_every_pass(
    tiny_pair, tmp_path, capsys
):
    target, _ = tiny_pair
    out = tmp_path / "instances.csv"
    args = [f"models.targets.cot={target}", "variant=cot", "max_tokens=16",
            f"results_dir={tmp_path}", "--instances", "2", "--passes", "3", "--csv", str(out),
            "--label", "here"]  # fmt: skip
    assert bench.main(args) == 0
    table = pd.read_csv(out)
    assert list(table.columns) == ["label", "instance", "pass", "tpot_ms", "pair", "cpu"]
    assert table["pair"].isna().all()  # one at a time: no pairs
    runs = sorted(zip(table["instance"], table["pass"], strict=True))
    assert runs == [(i, p) for i in (0, 1) for p in (0, 1, 2)]
    assert (table["label"] == "here").all() and (table["tpot_ms"] > 0).all()
    printed = capsys.readouterr().out
    assert "ANOVA F = " in printed and printed.count("\n") >= 5
    cpu = table["cpu"].iloc[0]  # the CPU and the vector ISA torch picks kernels for
    assert (table["cpu"] == cpu).all() and cpu.endswith(")")
    assert f"max_tokens 16, on {cpu}\n" in printed
    assert bench.main(["--summary", str(out)]) == 0  # the same figures, from the table
    summary = capsys.readouterr().out
    assert summary.startswith(f"here: 2 instances x 3 passes on {cpu}; instance means: ")
    assert summary.split("; ", 1)[1] == printed.splitlines()[-1] + "\n"
    table.drop(columns="cpu").to_csv(out, index=False)  # a table written before the column
    assert bench.main(["--summary", str(out)]) == 0
    assert capsys.readouterr().out == summary.replace(f" on {cpu}", "")
    assert bench.main(["--instances", "1"]) == 2  # one instance has no spread to show


@pytest.mark.slow  # real engines
def test_live_pairs_take_turns_and_the_summary_gives_each_pairs_ratio(tiny_pair, tmp_path, capsys):
    target, _ = tiny_pair
    out = tmp_path / "pairs.csv"
    args = [f"models.targets.cot={target}", "variant=cot", "max_tokens=16",
            f"results_dir={tmp_path}", "--paired", "--instances", "4", "--passes", "2",
            "--csv", str(out), "--label", "pairs"]  # fmt: skip
    assert bench.main(args) == 0
    table = pd.read_csv(out)
    assert sorted(zip(table["instance"], table["pair"], strict=True)) == [
        (i, i // 2) for i in (0, 1, 2, 3) for _ in (0, 1)
    ]
    means = table.groupby("instance")["tpot_ms"].mean()
    printed = capsys.readouterr().out.splitlines()
    ratios = printed[-1].split(": ", 1)[1].split(";")[0].split()
    assert [float(r) for r in ratios] == [
        pytest.approx(means[i] / means[i + 1], abs=5e-4) for i in (0, 2)
    ]
    assert bench.main(["--summary", str(out)]) == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[0].startswith("pairs: 4 instances (live pairs) x 2 passes on ")
    assert summary[1] == "pairs: " + printed[-1]
    assert bench.main(["--paired", "--instances", "3"]) == 2  # a pair needs two


def test_the_within_pair_test_of_one_pair_is_the_one_way_anova_of_its_two_instances():
    from scipy import stats

    first, second = [4.0, 4.4, 3.9, 4.2], [4.1, 4.8, 4.6, 4.5]
    line = bench.pairs_line([first, second])
    f = stats.f_oneway(first, second).statistic
    assert f"first started / second: {sum(first) / sum(second):.3f};" in line
    assert line.endswith(f"F = {f:.2f}, p = {stats.f_oneway(first, second).pvalue:.2g}")
    # two pairs that differ only by their minute (a shift) show no instance effect
    later = [t + 1 for t in second]
    shifted = bench.pairs_line([first, first, later, later])
    assert "above 1 in 0 of 2" in shifted and "F = 0.00, p = 1" in shifted
