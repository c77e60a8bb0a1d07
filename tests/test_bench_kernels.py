"""bench/kernels.py: the oneDNN primitives fresh engine processes create, on real engines."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import kernels as bench


@pytest.mark.slow  # real engines
def test_each_process_logs_its_kernels_and_the_verdict_compares_them(tiny_pair, tmp_path, capsys):
    target, _ = tiny_pair
    out = tmp_path / "kernels.csv"
    args = [f"models.targets.cot={target}", "variant=cot", "max_tokens=8",
            f"results_dir={tmp_path}", "--processes", "2", "--csv", str(out)]  # fmt: skip
    assert bench.main(args) == 0
    table = pd.read_csv(out)
    assert set(table["process"]) == {0, 1} and (table["count"] > 0).all()
    assert "matmul" in set(table["kind"])  # vLLM's linear layers on x86 go through oneDNN
    keys = ["kind", "implementation", "formats", "shapes", "count"]
    first, second = (table[table["process"] == i][keys].to_records(index=False) for i in (0, 1))
    same = sorted(map(tuple, first)) == sorted(map(tuple, second))
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict.startswith("the same primitives" if same else "the processes differ")
    assert bench.main(["--processes", "1"]) == 2


def test_a_creation_log_is_read_into_kernels_and_counted():
    log = "\n".join([
        "onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:1",
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,brg_matmul:avx512_core,"
        "undef,src:f32 wei:f32 dst:f32,,,1x576:576x576,0.2",
        "onednn_verbose,v1,primitive,create:cache_hit,cpu,matmul,brg_matmul:avx512_core,"
        "undef,src:f32 wei:f32 dst:f32,,,1x576:576x576,0.01",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,,,,1x1,0.1",
    ])  # fmt: skip
    got = bench.kernels(log)
    assert got == {
        ("matmul", "brg_matmul:avx512_core", "src:f32 wei:f32 dst:f32", "1x576:576x576"): 2
    }
    assert bench.verdict([got, got]).startswith("the same primitives in every process: 1 ")
    assert bench.verdict([got, {}]).startswith("the processes differ")
