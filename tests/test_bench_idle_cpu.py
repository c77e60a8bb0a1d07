"""bench/idle_cpu.py: a real server's processes sampled after its requests end."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import idle_cpu as bench


@pytest.mark.slow  # a real server
def test_a_stopped_server_spends_nothing_and_answers_once_continued(tiny_pair, tmp_path, capsys):
    target, _ = tiny_pair
    out = tmp_path / "idle.csv"
    args = [f"models.targets.cot={target}", "variant=cot", "--rounds", "1", "--busy", "1",
            "--after", "0.5", "--csv", str(out)]  # fmt: skip
    assert bench.main(args) == 0
    table = pd.read_csv(out)
    assert set(table["process"]) >= {"api_server", "EngineCore"}
    assert set(table["t_s"]) == {0.25, 0.5}
    assert (table[table["stopped"]]["cpu_s"] == 0).all()
    printed = capsys.readouterr().out
    answered = int(printed.split("stopped round 0: ")[1].split(" ")[0])
    assert answered >= 1  # SIGCONT brought the whole server back
