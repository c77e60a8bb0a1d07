"""The interleaved order of a job's engine (A) and its baseline (B), and the join of their records."""

from __future__ import annotations

import dataclasses

import pytest

from harness.measure import pairing
from tests import run_fixtures


def _flat(plan: list[tuple[str, range]]) -> str:
    return " ".join(side + "".join(map(str, ids)) for side, ids in plan)


def test_abba_waves_cover_every_problem_once_per_side_in_order():
    assert _flat(pairing.turns(5, 2)) == "A01 B01 B23 A23 A4 B4"
    assert _flat(pairing.turns(3, 1, "AB")) == "A0 B0 A1 B1 A2 B2"
    for n, wave in ((0, 1), (7, 3), (40, 1), (41, 4)):
        plan = pairing.turns(n, wave)
        for side in (pairing.JOB, pairing.BASELINE):
            done = [i for s, ids in plan if s == side for i in ids]
            assert done == list(range(n))


@pytest.mark.parametrize("waves", [4, 40])
def test_each_side_goes_first_and_follows_a_switch_equally_often(waves):
    plan = pairing.turns(waves, 1)
    first = {s: 0 for s in (pairing.JOB, pairing.BASELINE)}
    switched = dict(first)
    for i, (side, _) in enumerate(plan):
        first[side] += i % 2 == 0
        switched[side] += i > 0 and plan[i - 1][0] != side
    assert first[pairing.JOB] == first[pairing.BASELINE] == waves // 2
    assert abs(switched[pairing.JOB] - switched[pairing.BASELINE]) <= 1


@pytest.mark.parametrize("args", [(3, 0, "ABBA"), (3, 1, "ABB"), (3, 1, "AABB"), (-1, 1, "AB")])
def test_a_bad_schedule_is_refused(args):
    with pytest.raises(ValueError):
        pairing.turns(*args)


def test_join_carries_the_baselines_timing_and_refuses_other_problems():
    job = run_fixtures.Job("t", run_fixtures.SEED_STUDY[3], "synth_easy", "easy", 2, n_problems=3)
    records = run_fixtures.records(job)
    base = [dataclasses.replace(r, tpot_s=0.05, e2e_s=2.0, ttft_s=0.1, sent_s=0.5) for r in records]
    joined = pairing.join(records, base)
    assert [r.pair_tpot_s for r in joined] == [0.05] * 3
    assert [(r.pair_e2e_s, r.pair_ttft_s, r.pair_sent_s) for r in joined] == [(2.0, 0.1, 0.5)] * 3
    assert [r.pair_output_hash for r in joined] == [r.output_hash for r in records]
    assert [r.tpot_s for r in joined] == [r.tpot_s for r in records]
    with pytest.raises(ValueError, match="different problems"):
        pairing.join(records, base[::-1])


class _Recorder:
    """A generator that answers at once and records each call's prompts and load."""

    def __init__(self, calls: list):
        self.calls = calls

    def generate(self, prompts, params, load, on_output) -> None:
        self.calls.append((self, len(prompts), load))
        for i in range(len(prompts)):
            on_output(i, None)

    def spec_counts(self):
        return None

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


def test_both_sides_of_an_open_loop_window_get_the_same_arrivals():
    """Windows of pair_window requests; each window's load is the job's, seeded per window,
    the same on both sides (the settling request aside)."""
    from harness.backends.engine import EngineSpec
    from harness.data.problems import Problem
    from harness.sweep.runner import PreparedJob, Request, interleave

    job = run_fixtures.Job("t", run_fixtures.SEED_STUDY[3], "synth_easy", "easy", 2, n_problems=7)
    info = dataclasses.replace(
        run_fixtures.records(job)[0].job, request_rate=4.0, seed=5, concurrency=2
    )
    requests = tuple(
        Request(Problem(str(i), "d", "easy", "q", "1", "s"), (1, 2, i)) for i in range(7)
    )
    spec = EngineSpec("t", None, 0, ())
    prepared = PreparedJob(info, spec, requests, 8, baseline=spec, pair_window=3)
    calls: list = []
    sides = {pairing.JOB: _Recorder(calls), pairing.BASELINE: _Recorder(calls)}
    interleave(prepared, sides, dict.fromkeys(sides, lambda i, c: None), settle=False)
    assert [n for _, n, _ in calls] == [3, 3, 3, 3, 1, 1]  # windows of 3: ABBA, then A B
    loads = [load for _, _, load in calls]
    assert [load.seed for load in loads] == [5, 5, 6, 6, 7, 7]
    assert {(load.request_rate, load.concurrency) for load in loads} == {(4.0, 2)}
    assert [calls[i][0] is sides[pairing.JOB] for i in range(6)] == [1, 0, 0, 1, 1, 0]


def test_each_side_settles_before_its_first_window_after_a_switch_and_the_first_window():
    """With settle on, one unrecorded 1-request call at concurrency 1 precedes the first
    window of each run of one side, the job's very first window included (the plain side
    ran last before it: its warm-up and the sentinel)."""
    from harness.backends.engine import EngineSpec
    from harness.data.problems import Problem
    from harness.sweep.runner import PreparedJob, Request, interleave

    job = run_fixtures.Job("t", run_fixtures.SEED_STUDY[3], "synth_easy", "easy", 2, n_problems=6)
    info = dataclasses.replace(run_fixtures.records(job)[0].job, concurrency=2)
    requests = tuple(
        Request(Problem(str(i), "d", "easy", "q", "1", "s"), (1, 2, i)) for i in range(6)
    )
    spec = EngineSpec("t", None, 0, ())
    prepared = PreparedJob(info, spec, requests, 8, baseline=spec, pair_window=2)
    calls: list = []
    sides = {pairing.JOB: _Recorder(calls), pairing.BASELINE: _Recorder(calls)}
    settled: list[str] = []
    interleave(
        prepared, sides, dict.fromkeys(sides, lambda i, c: None),
        on_settle=lambda side, completion: settled.append(side),
    )  # fmt: skip
    side = {id(sides[s]): s for s in sides}
    got = [(side[id(g)], n, load.concurrency) for g, n, load in calls]
    # windows of 2: A B B A A B, each side's run of windows led by a settle
    assert got == [
        ("A", 1, 1), ("A", 2, 2), ("B", 1, 1), ("B", 2, 2), ("B", 2, 2),
        ("A", 1, 1), ("A", 2, 2), ("A", 2, 2), ("B", 1, 1), ("B", 2, 2),
    ]  # fmt: skip
    assert settled == ["A", "B", "A", "B"]
