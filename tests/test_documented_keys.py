"""Every key and group choice README documents accepts a valid value: each is planned
(``plan=true``) through the command line's own checks (in this process; one case through
the real command line), so a validator can never again refuse a whole feature while the
tests of its refusals stay green."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config import check_command_line
from harness.sweep.plan import show
from harness.sweep.sweeper import plan
from tests import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

# One valid example per documented key (README's key table), with what it needs beside it.
EXAMPLES: dict[str, list[str]] = {
    "spec.k": ["variant=cot_sd", "spec.k=3"],
    "spec.draft_sample_method": [
        "variant=cot_sd",
        "spec.k=3",
        "spec.draft_sample_method=probabilistic",
    ],
    "spec.k_schedule": ["variant=cot_sd", "spec.k=3", "spec.k_schedule=[[1,2,3],[3,32,0]]"],
    "spec.prompt_lookup_max": ["variant=cot_ngram", "spec.k=3", "spec.prompt_lookup_max=5"],
    "spec.prompt_lookup_min": ["variant=cot_ngram", "spec.k=3", "spec.prompt_lookup_min=1"],
    "limit": ["limit=7"],
    "seed": ["seed=3"],
    "temperature": ["temperature=0.7"],
    "max_tokens": ["max_tokens=16"],
    "concurrency": ["concurrency=4"],
    "backend": ["backend=server"],
    "request_rate": ["backend=server", "request_rate=2.5", "concurrency=4"],
    "burstiness": ["backend=server", "request_rate=inf", "burstiness=0.5"],
    "server.url": ["backend=server", "server.url=http://127.0.0.1:8000"],
    "slo.{ttft_ms,tpot_ms,e2e_ms}": ["slo.ttft_ms=200", "slo.tpot_ms=50", "slo.e2e_ms=5000"],
    "warmup": ["warmup=0"],
    "repeats": ["repeats=2"],
    "instances": ["instances=2"],
    "sentinel_requests": ["sentinel_requests=3"],
    "pair_window": ["pair_window=4"],
    "tracking": ["tracking=none"],
    "pairing": ["pairing=sequential"],
    "results_dir": [],  # every case sets it (to a temporary folder)
    "sweep": ["sweep=documented"],
    "datasets_dir": ["datasets_dir=."],
    "force": ["force=true"],
    "calibrate": ["calibrate=false"],
    "plan": [],  # every case sets it
    "prompts.{direct,cot,cod}": ["prompts.cot=Think step by step."],
    "models.{targets,drafts}.<role>": ["+models.drafts.extra=some-org/some-draft"],
}
# group choices that plan only beside another key
GROUP_NEEDS = {"serving": ["backend=server"]}


def _table(heading: str) -> list[list[str]]:
    """The rows of the markdown table whose header's first cell is ``heading``."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _keys() -> list[str]:
    return [re.sub(r"`", "", row[0]) for row in _table("key")]


def _choices() -> list[tuple[str, str]]:
    return [
        (group, choice)
        for row in _table("group")
        for group in [row[0].strip("`")]
        for choice in re.findall(r"`([\w.]+)`", row[1])
    ]


def test_every_documented_key_has_an_example():
    assert _keys(), "README's key table was not found"
    assert set(_keys()) == set(EXAMPLES), "README's key table and EXAMPLES name other keys"


def _plan(tmp_path: Path, overrides: list[str]) -> None:
    """What ``python -m harness <overrides> plan=true`` checks and prints."""
    args = [*overrides, f"results_dir={tmp_path}", "plan=true"]
    cfg = check_command_line(args)
    printed: list[str] = []
    show(plan([(args, cfg)]), {tuple(args): cfg}, out=printed.append)
    assert "plan: 1 job(s)" in "\n".join(printed)


@pytest.mark.parametrize("key", _keys())
def test_a_documented_key_plans_with_a_valid_value(key, tmp_path):
    _plan(tmp_path, EXAMPLES[key])


@pytest.mark.parametrize(("group", "choice"), _choices())
def test_a_documented_group_choice_plans(group, choice, tmp_path):
    _plan(tmp_path, [*GROUP_NEEDS.get(group, []), f"{group}={choice}"])


def test_a_k_schedule_is_printed_in_the_plan(tmp_path):
    run = cli.run(
        "harness", "variant=cot_sd", "spec.k=3", "limit=2", "max_tokens=8",
        "spec.k_schedule=[[1,2,3],[3,32,0]]", "plan=true", f"results_dir={tmp_path}", cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-600:]
    assert "'num_speculative_tokens_per_batch_size': [[1, 2, 3], [3, 32, 0]]" in run.stdout
