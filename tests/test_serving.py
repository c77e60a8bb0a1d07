"""The K schedule by batch size: its ranges, its recommendation from the cost model's
predictions, its check against the best fixed K, and the schedule in an engine spec."""

from __future__ import annotations

import pandas as pd
import pytest

from harness import schedule
from harness.backends.engine import EngineSpec
from harness.config import check_command_line, compose_config
from harness.results import job_name
from reports import serving


@pytest.mark.parametrize(
    ("best", "expected"),
    [
        ({1: 3, 4: 3, 16: 0, 32: 0}, [[1, 8, 3], [9, 32, 0]]),
        ({1: 3, 4: 1, 16: 0, 32: 1}, [[1, 2, 3], [3, 8, 1], [9, 22, 0], [23, 32, 1]]),
        ({1: 0, 4: 0, 16: 0, 32: 0}, [[1, 32, 0]]),
    ],
)
def test_each_levels_k_holds_to_the_geometric_midpoints(best, expected):
    assert schedule.from_levels(sorted(best), best) == expected


def _row(k: int, concurrency: int, predicted: float, measured: float, **extra) -> dict:
    return {"sweep_id": "s", "backend": "server", "variant": "cot_sd", "dataset": "d",
            "request_rate": 0.0, "k_schedule": "none", "k": k, "concurrency": concurrency,
            "speedup_tpot_predicted": predicted, "speedup_tpot": measured,
            "speedup_tpot_lo": measured - 0.1, "speedup_tpot_hi": measured + 0.1} | extra  # fmt: skip


def test_the_schedule_takes_the_predicted_best_k_and_zero_where_none_pays():
    table = pd.DataFrame([
        _row(1, 1, 1.3, 1.2), _row(3, 1, 1.6, 1.5),   # light load: K = 3
        _row(1, 4, 1.2, 1.25), _row(3, 4, 1.1, 1.0),  # K = 1 (measured agrees)
        _row(1, 16, 0.9, 1.05), _row(3, 16, 0.7, 0.8),  # nothing pays: K = 0 (measured K = 1)
        _row(0, 16, float("nan"), 1.0),               # a baseline row is not a candidate
        _row(3, 8, 2.0, 2.0, request_rate=4.0),       # open loop: not on the batch-size axis
    ])  # fmt: skip
    (rec,) = serving.k_schedules(table).to_dict("records")
    assert rec["schedule"] == "[[1,2,3],[3,8,1],[9,16,0]]"
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=0"
    assert rec["measured"] == "1: K=3, 4: K=1, 16: K=1"
    assert rec["overrides"] == (
        "variant=cot_sd dataset=d spec.k=3 spec.k_schedule=[[1,2,3],[3,8,1],[9,16,0]]"
    )
    assert rec["off"] == "target alone"  # speculation off was not calibrated
    # make serve passes these words to python -m harness: its checks must take them
    overrides = rec["overrides"].replace("dataset=d", "dataset=synth_easy").split()
    assert check_command_line(overrides).spec.k_schedule == [[1, 2, 3], [3, 8, 1], [9, 16, 0]]
    # calibrated, K = 0 keeps paying for the loaded draft: at 16 in flight K = 1 beats it
    off = {1: 0.8, 4: 0.9, 16: 0.6}
    priced = table.assign(speedup_off_predicted=table["concurrency"].map(off))
    (rec,) = serving.k_schedules(priced).to_dict("records")
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=1"
    assert rec["schedule"] == "[[1,2,3],[3,16,1]]"
    assert rec["off"] == "1: 0.80x, 4: 0.90x, 16: 0.60x"
    # a level left uncalibrated says so, and its K = 0 counts as the target alone
    partly = table.assign(speedup_off_predicted=table["concurrency"].map({1: 0.8, 4: 0.9}))
    (rec,) = serving.k_schedules(partly).to_dict("records")
    assert rec["off"] == "1: 0.80x, 4: 0.90x, 16: target alone"
    assert rec["predicted"] == "1: K=3, 4: K=1, 16: K=0"
    # the schedule's own runs, beside the best fixed K at each concurrency
    ran = [_row(3, c, float("nan"), s, k_schedule="1-2k3_3-8k1_9-16k0")
           for c, s in ((1, 1.45), (16, 1.02))]  # fmt: skip
    checks = serving.schedule_checks(pd.concat([table, pd.DataFrame(ran)]))
    assert checks[["concurrency", "best_fixed_k", "fixed_speedup_tpot"]].values.tolist() == [
        [1, 3, 1.5], [16, 1, 1.05],
    ]  # fmt: skip
    assert checks["speedup_tpot"].tolist() == [1.45, 1.02]


def test_a_schedules_k_at_a_batch_size_is_vllms():
    def spec(schedule):
        cfg = compose_config(["variant=cot_sd", "spec.k=3", f"spec.k_schedule={schedule}"])
        return EngineSpec.from_config(cfg)

    gap_and_tail = spec("[[1,4,2],[9,16,3],[17,20,0]]")  # max_num_seqs 32
    assert [gap_and_tail.k_at(b) for b in (1, 4, 5, 8, 9, 16, 17, 20, 21, 32)] == [
        2, 2, 2, 2, 3, 3, 0, 0, 0, 0
    ]  # fmt: skip
    assert EngineSpec.from_config(compose_config(["variant=cot_sd", "spec.k=3"])).k_at(7) == 3


def test_a_k_schedule_reaches_vllm_and_names_the_job():
    cfg = compose_config(["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[1,2,3],[3,32,0]]",
                          "concurrency=4"])  # fmt: skip
    spec = EngineSpec.from_config(cfg)
    speculative = spec.llm_kwargs()["speculative_config"]
    assert speculative["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 32, 0]]
    assert speculative["num_speculative_tokens"] == 3
    assert "num_speculative_tokens_per_batch_size" not in str(EngineSpec.baseline(cfg))
    assert spec != EngineSpec.from_config(compose_config(["variant=cot_sd", "spec.k=3"]))
    assert job_name(cfg) == "cot_sd-synth_easy-k3-c4-ks1-2k3_3-32k0-s0-t0-n30"
