"""Teacher prompts and the vLLM teacher: request building, output conversion, a real engine."""

import json

import pytest

from harness.data.problems import Problem
from train import data
from train.data_config import compose_data_config
from train.formats import CodBounds
from train.teachers.base import TeacherPrompts
from train.teachers.vllm_teacher import VllmTeacher, reply_from_output

PROBLEM = Problem(
    "p1", "toy", "easy", "What is 2 + 3?", "5", "2 + 3 = 5. The answer is \\boxed{5}."
)


def test_templates_fill_problem_cot_and_bounds():
    prompts = TeacherPrompts(
        cot_system="Rewrite. Costs $$1.",
        cot_user="Q: $question\nRef: $solution\nA: $answer",
        cod_system="$min_steps-$max_steps steps of <= $max_words words",
        cod_user="Q: $question\nCoT: $cot",
    )
    cot = prompts.cot_request(PROBLEM)
    assert (cot.key, cot.system) == ("p1", "Rewrite. Costs $1.")
    assert cot.user == "Q: What is 2 + 3?\nRef: 2 + 3 = 5. The answer is \\boxed{5}.\nA: 5"
    cod = prompts.cod_request(PROBLEM, "1. 2 + 3 = 5\n#### 5", CodBounds(3, 5, 5))
    assert cod.system == "3-5 steps of <= 5 words"
    assert cod.messages() == [
        {"role": "system", "content": "3-5 steps of <= 5 words"},
        {"role": "user", "content": "Q: What is 2 + 3?\nCoT: 1. 2 + 3 = 5\n#### 5"},
    ]


def test_configured_prompts_digest_changes_with_the_text():
    prompts = compose_data_config([]).teacher_prompts()
    changed = TeacherPrompts(
        prompts.cot_system + " Be brief.", prompts.cot_user, prompts.cod_system, prompts.cod_user
    )
    assert prompts.digest() != changed.digest()
    assert "$" not in prompts.cod_request(PROBLEM, "1. x\n#### 5", CodBounds()).system


def completion(text, finish, tokens):
    from vllm.outputs import CompletionOutput  # imported here: vLLM takes seconds to import

    return CompletionOutput(0, text, tokens, None, None, finish_reason=finish)


def test_vllm_outputs_become_replies_with_token_counts():
    from vllm.outputs import RequestOutput

    done = RequestOutput(
        "r1", None, [1, 2, 3], None, [completion("1. a\n#### 5", "stop", [7, 8])], True
    )
    cut = RequestOutput("r2", None, [1], None, [completion("1. a", "length", [7] * 16)], True)
    aborted = RequestOutput("r3", None, [1], None, [completion("", "abort", [])], True)
    assert reply_from_output("k", done).to_row() == {
        "key": "k",
        "text": "1. a\n#### 5",
        "finish_reason": "stop",
        "error": None,
        "input_tokens": 3,
        "output_tokens": 2,
    }
    assert (
        reply_from_output("k", cut).finish_reason,
        reply_from_output("k", cut).output_tokens,
    ) == ("length", 16)
    assert reply_from_output("k", aborted).error == "finish_reason abort"


def test_vllm_teacher_engine_spec_is_the_model_alone_with_the_configured_engine(tmp_path):
    cfg = compose_data_config(
        ["teacher=vllm", f"vllm.model={tmp_path}", "vllm.engine.max_model_len=512"]
    )
    spec = VllmTeacher(cfg.vllm, cfg.teacher_prompts(), cfg.cod).engine_spec()
    assert (spec.target, spec.draft, spec.k) == (str(tmp_path), None, 0)
    assert dict(spec.settings)["max_model_len"] == 512
    assert dict(spec.settings)["device"] == "cpu"


@pytest.mark.slow
def test_vllm_teacher_runs_the_pipeline_on_a_tiny_random_model(tmp_path):
    """A random model writes garbage: every problem reaches the teacher and is dropped by reason."""
    from harness.backends import engine
    from train.tiny import build_random_pair

    target, _ = build_random_pair(tmp_path / "models")
    args = [
        "experiment=tiny",
        f"out_dir={tmp_path / 'data'}",
        "teacher=vllm",
        f"vllm.model={target}",
        "vllm.max_tokens=12",
        "min_kept_share=0",  # a random model keeps nothing; count the drops instead of failing
        "~datasets.medium",
        "~datasets.hard",
        "datasets.easy.train.size=4",
    ]
    try:
        assert data.main(args) == 0
    finally:
        engine.clear()
    manifest = json.loads((tmp_path / "data/tiny/easy/manifest.json").read_text())
    assert (manifest["teacher"], manifest["model"]) == ("vllm", str(target))
    counts = manifest["counts"]
    assert counts["sent_to_teacher"] == 4
    assert sum(counts["dropped"].values()) == 4 - counts["kept"]
    assert all(reason.startswith(("cot_", "cod_")) for reason in counts["dropped"])
    assert 4 <= counts["teacher_output_tokens"] <= 12 * 8
