"""draftbench beside its peers: ``bench/peers.py``'s rounds against a real vLLM server and
the agreement table a study's report shows from them (:mod:`reports.peers`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports import peers

ROOT = Path(__file__).resolve().parents[1]


def _rounds(comparison: str, ours: list[float], theirs: list[float], bound) -> list[peers.Round]:
    return [peers.Round(comparison, "m", 0, "batch 1", i + 1, o, t, "ms", bound)
            for i, (o, t) in enumerate(zip(ours, theirs, strict=True))]  # fmt: skip


def test_agreement_judges_the_geometric_mean_of_the_rounds_ratios_against_its_bound(tmp_path):
    rounds = [
        *_rounds("close", [10.1, 10.0, 9.95], [10.0, 10.0, 10.0], 0.05),
        *_rounds("far", [12.0, 11.0], [10.0, 10.0], 0.05),
        *_rounds("speed", [80.0, 90.0], [10.0, 9.0], None),
        *_rounds("wide", [10.4, 9.5, 10.1], [10.0, 10.0, 10.0], 0.05),
        *_rounds("blank", [10.0, 10.0, 10.1], [10.0, 0.0, 10.0], 0.05),  # 0: measured nothing
    ]
    path = tmp_path / peers.ROUNDS
    peers.write_rounds(rounds, path)
    table = peers.agreement(pd.read_csv(path)).set_index("comparison")
    assert table.loc["close", "ratio"] == pytest.approx((1.01 * 1.0 * 0.995) ** (1 / 3))
    assert table.loc["far", "ratio"] == pytest.approx(np.sqrt(1.2 * 1.1))
    assert table.loc["blank", "ratio"] == pytest.approx(np.sqrt(1.01))
    assert list(table["rounds"]) == [3, 2, 2, 3, 2]
    for name in table.index:
        assert table.loc[name, "ratio_lo"] < table.loc[name, "ratio"] < table.loc[name, "ratio_hi"]
    agrees = table["agrees"].to_dict()
    assert agrees == {"close": "yes", "far": "no", "speed": "", "wide": "ratio only",
                      "blank": "ratio only"}  # fmt: skip
    assert table.loc["wide", "ratio_lo"] < 0.95  # the interval reaches past the bound
    lines = "\n".join(peers.section(table.reset_index()))
    assert "| far | `m` | 0 | batch 1 | 2 |" in lines and "| **no** |" in lines
    assert "(speed ratio)" in lines and "| ratio only |" in lines
    assert peers.agreement(pd.DataFrame(columns=[*peers.KEYS, "draftbench", "peer"])).empty


@pytest.mark.slow
def test_the_serve_part_writes_each_rounds_tpot_and_itl_beside_vllm_bench_serves(
    tiny_pair, tmp_path
):
    target, _ = tiny_pair
    out = tmp_path / "rounds.csv"
    argv = [sys.executable, str(ROOT / "bench" / "peers.py"), "--parts", "serve",
            "--smollm2", str(target), "--serve-rates", "8,inf", "--serve-rounds", "2",
            "--serve-prompts", "4", "--serve-concurrency", "2", "--input-len", "16",
            "--output-len", "24", "--csv", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = pd.read_csv(out)
    assert len(rounds) == 2 * 2 * 2  # rates x rounds x (TPOT, ITL)
    assert set(rounds["comparison"]) == {"vllm bench serve TPOT", "vllm bench serve ITL"}
    assert set(rounds["load"]) == {"8 req/s, at most 2 in flight", "inf req/s, at most 2 in flight"}
    # on a random tiny model a whole output can reach the client in one chunk (both sides'
    # TPOT 0), and vllm bench serve re-tokenizes its text to count tokens: 0 reads nothing
    assert (rounds[["draftbench", "peer"]] >= 0).all().all()
    assert np.isfinite(rounds[["draftbench", "peer"]].to_numpy()).all()
    assert len(peers.agreement(rounds)) == 4  # (TPOT, ITL) x rates
    assert set(rounds["bound"]) == {peers.SERVE_BOUND}
    assert "vllm bench serve TPOT" in done.stdout and "draftbench / peer" in done.stdout


def test_bad_rates_and_a_missing_smollm2_are_one_line_naming_the_fix(tmp_path):
    bench = [sys.executable, str(ROOT / "bench" / "peers.py")]
    done = subprocess.run([*bench, "--parts", "serve", "--serve-rates", "2,fast"],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "--serve-rates=2,fast: a comma list of requests/s" in done.stderr
    if (ROOT / "models" / "smollm2" / "target_base").is_dir():
        return  # converted in this checkout: nothing missing to name
    done = subprocess.run([*bench, "--parts", "latency"], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "`make models experiment=smollm2` makes it" in done.stderr
