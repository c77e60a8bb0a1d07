"""The Gemini Batch API teacher, run with the real google-genai client against a local fake.

Each of the real service's bad days (``tests/fake_gemini.py``) has a test here.
"""

import json
import logging

import pytest
from fake_gemini import API_KEY, FakeGemini

from train import data
from train.data_config import GeminiConfig
from train.teachers.base import TeacherRequest
from train.teachers.gemini import (
    BatchRun,
    BatchWaitTimeout,
    TeacherError,
    estimate_cost,
    parse_result_line,
    plan_jobs,
    reply_from_response,
    request_line,
)

KEYS = [f"p{i}" for i in range(5)]


def answer(key, request):
    question = request["contents"][0]["parts"][0]["text"]
    return f"1. Read: {question}\n#### {key}"


def requests(keys=KEYS):
    return [TeacherRequest(key, "Solve it.", f"question {key}") for key in keys]


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", API_KEY)
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")  # must not switch the client


def config(fake, **overrides):
    values = {
        "base_url": fake.url,
        "poll_initial_s": 0.001,
        "poll_max_s": 0.01,
        "wait_timeout_s": 30.0,
    }
    return GeminiConfig(**(values | overrides))


def run_stage(fake, tmp_path, keys=KEYS, **overrides):
    return BatchRun(config(fake, **overrides), "cot", tmp_path, confirm=True).run(requests(keys))


def test_full_run_answers_every_key_through_upload_batch_and_download(
    api_key, tmp_path, caplog, capsys
):
    caplog.set_level(logging.DEBUG)
    with FakeGemini(answer) as fake:
        replies = run_stage(fake, tmp_path)
    assert {k: r.text for k, r in replies.items()} == {
        k: f"1. Read: question {k}\n#### {k}" for k in KEYS
    }
    assert all(r.finish_reason == "stop" and r.input_tokens == 50 for r in replies.values())
    assert fake.upload_mime_types == ["jsonl"]
    assert fake.job_keys() == [KEYS]
    assert fake.bad_auth == 0
    assert "POST /upload/v1beta/files" in fake.calls
    assert "GET /v1beta/files/batch-b1:download" in fake.calls
    # the key never leaves the environment: not in logs, stdout or any file written
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert API_KEY not in caplog.text + capsys.readouterr().out + written


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_configured_api_version_prefixes_every_call(api_key, tmp_path, version):
    with FakeGemini(answer) as fake:
        replies = run_stage(fake, tmp_path, api_version=version)
    assert all(r.text for r in replies.values())
    assert all(c.split()[1].startswith((f"/{version}/", f"/upload/{version}/")) for c in fake.calls)


def test_jobs_are_split_under_the_request_cap(api_key, tmp_path):
    with FakeGemini(answer) as fake:
        replies = run_stage(fake, tmp_path, max_requests_per_job=2)
    assert fake.job_keys() == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert set(replies) == set(KEYS)
    assert all(r.text for r in replies.values())


def test_failed_job_is_resubmitted_with_only_its_missing_keys(api_key, tmp_path):
    with FakeGemini(answer, fail_jobs={1: "backend hiccup"}) as fake:
        replies = run_stage(fake, tmp_path, max_requests_per_job=3)
    assert fake.job_keys() == [["p0", "p1", "p2"], ["p3", "p4"], ["p0", "p1", "p2"]]
    assert all(r.text and r.text.endswith(r.key) for r in replies.values())
    state = json.loads((tmp_path / "cot" / "state.json").read_text())
    assert [job["state"] for job in state["jobs"]] == [
        "JOB_STATE_FAILED",
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_SUCCEEDED",
    ]
    assert state["errors"]["p0"] == ["job batches/b1 JOB_STATE_FAILED: failed: backend hiccup"]
    assert state["jobs"][0]["error"] == "backend hiccup"  # read from the raw operation


def test_per_line_error_resubmits_that_key_alone(api_key, tmp_path):
    with FakeGemini(answer, error_keys={"p3": 1}) as fake:
        replies = run_stage(fake, tmp_path)
    assert fake.job_keys() == [KEYS, ["p3"]]
    assert replies["p3"].text == "1. Read: question p3\n#### p3"


def test_key_that_keeps_failing_becomes_an_error_reply_after_max_rounds(api_key, tmp_path):
    with FakeGemini(answer, error_keys={"p1": 99}) as fake:
        replies = run_stage(fake, tmp_path, max_rounds=2)
    assert fake.job_keys() == [KEYS, ["p1"]]
    assert replies["p1"].text is None
    assert replies["p1"].finish_reason == "error"
    assert replies["p1"].error == "line error: internal error (after 2 error(s))"
    assert replies["p0"].finish_reason == "stop"


def test_malformed_result_line_is_counted_and_its_key_resubmitted(api_key, tmp_path):
    with FakeGemini(answer, malformed_keys={"p2": 1}) as fake:
        replies = run_stage(fake, tmp_path)
    assert fake.job_keys() == [KEYS, ["p2"]]
    assert replies["p2"].text.endswith("#### p2")
    state = json.loads((tmp_path / "cot" / "state.json").read_text())
    assert state["malformed_lines"] == 1


def test_interrupted_run_resumes_the_running_job_without_resubmitting(api_key, tmp_path):
    with FakeGemini(answer, hold=True) as fake:
        with pytest.raises(BatchWaitTimeout, match=r"batches/b1 still JOB_STATE_PENDING .* re-run"):
            run_stage(fake, tmp_path, wait_timeout_s=0.0)
        assert len(fake.jobs) == 1
        fake.hold = False
        replies = run_stage(fake, tmp_path)  # a new process would do exactly this
        assert len(fake.jobs) == 1
        assert len(fake.uploads) == 1
    assert {r.text.rsplit(" ", 1)[-1] for r in replies.values()} == set(KEYS)


def test_changed_request_is_resubmitted_and_unchanged_ones_reused(api_key, tmp_path):
    with FakeGemini(answer) as fake:
        run_stage(fake, tmp_path)
        cfg = config(fake)
        changed = [*requests(KEYS[:4]), TeacherRequest("p4", "Solve it.", "a new question")]
        replies = BatchRun(cfg, "cot", tmp_path, confirm=True).run(changed)
    assert fake.job_keys() == [KEYS, ["p4"]]
    assert replies["p4"].text.startswith("1. Read: a new question")


def cancel_cli(fake, state_path):
    return data.main(["cancel", str(state_path), "experiment=tiny", f"gemini.base_url={fake.url}"])


def test_cancel_cli_refreshes_states_and_skips_finished_jobs(api_key, tmp_path, capsys):
    state_path = tmp_path / "cot" / "state.json"
    with FakeGemini(answer, hold=True) as fake:
        with pytest.raises(BatchWaitTimeout):
            run_stage(fake, tmp_path, max_requests_per_job=3, wait_timeout_s=0.0)
        fake.finish(fake.jobs[0])  # finished on the service; the checkpoint still says pending
        assert cancel_cli(fake, state_path) == 0
        assert [j.state for j in fake.jobs] == ["BATCH_STATE_SUCCEEDED", "BATCH_STATE_CANCELLED"]
        assert cancel_cli(fake, state_path) == 0  # nothing left to cancel
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == [
        "batches/b1: already JOB_STATE_SUCCEEDED",
        "cancelled batches/b2",
        "batches/b1: already JOB_STATE_SUCCEEDED",
        "batches/b2: already JOB_STATE_CANCELLED",
    ]
    state = json.loads(state_path.read_text())
    assert [j["state"] for j in state["jobs"]] == ["JOB_STATE_SUCCEEDED", "JOB_STATE_CANCELLED"]


def test_cancelled_job_partial_results_are_kept_and_the_rest_resubmitted(api_key, tmp_path):
    with FakeGemini(answer, hold=True, partial_on_cancel=2) as fake:
        with pytest.raises(BatchWaitTimeout):
            run_stage(fake, tmp_path, wait_timeout_s=0.0)
        assert cancel_cli(fake, tmp_path / "cot" / "state.json") == 0
        fake.hold = False
        replies = run_stage(fake, tmp_path)
    assert fake.job_keys() == [KEYS, KEYS[2:]]
    assert all(r.text.endswith(f"#### {k}") for k, r in replies.items())


def test_cancel_cli_without_a_checkpoint_is_one_line(api_key, tmp_path, capsys):
    assert data.main(["cancel", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no checkpoint {tmp_path / 'nope.json'}"


def test_repeated_job_failure_stops_with_its_reason_instead_of_rebilling(api_key, tmp_path):
    reason = "thinking_budget 0 is not supported by this model"
    failed_like = f"batches/b2 failed like an earlier .*{reason}"
    with (
        FakeGemini(answer, fail_jobs={1: reason, 2: reason}) as fake,
        pytest.raises(TeacherError, match=failed_like),
    ):
        run_stage(fake, tmp_path, max_rounds=5)
    assert len(fake.jobs) == 2


def test_expired_job_is_resubmitted_without_using_a_round(api_key, tmp_path):
    with FakeGemini(answer, expire_jobs={1}) as fake:
        replies = run_stage(fake, tmp_path, max_rounds=1)
    assert fake.job_keys() == [KEYS, KEYS]
    assert all(r.finish_reason == "stop" for r in replies.values())


def test_lines_missing_from_a_succeeded_job_are_resubmitted(api_key, tmp_path):
    with FakeGemini(answer, missing_keys={"p4": 1}) as fake:
        replies = run_stage(fake, tmp_path)
    assert fake.job_keys() == [KEYS, ["p4"]]
    assert replies["p4"].text.endswith("#### p4")
    state = json.loads((tmp_path / "cot" / "state.json").read_text())
    assert state["errors"]["p4"] == [
        "job batches/b1 JOB_STATE_SUCCEEDED: missing from the results file"
    ]


def test_extra_fields_line_separators_and_thought_tokens(api_key, tmp_path):
    def odd_answer(key, request):
        return f"1. a\u2028b\u0085c\n#### {key}"  # separators splitlines() would cut at

    with FakeGemini(odd_answer, extra_fields=True) as fake:
        replies = run_stage(fake, tmp_path)
    assert fake.job_keys() == [KEYS]  # nothing re-billed
    assert replies["p0"].text == "1. a\u2028b\u0085c\n#### p0"
    assert replies["p0"].output_tokens == len(replies["p0"].text.split()) + 7  # + thoughts
    assert json.loads((tmp_path / "cot" / "state.json").read_text())["malformed_lines"] == 0


def test_503_after_create_finds_the_job_instead_of_creating_a_second(api_key, tmp_path):
    with FakeGemini(answer, create_503=1) as fake:
        replies = run_stage(fake, tmp_path)
    assert len(fake.jobs) == 1
    assert fake.jobs[0].display_name.startswith("draftbench-cot-round1-job0-")
    assert "GET /v1beta/batches" in fake.calls
    assert all(r.finish_reason == "stop" for r in replies.values())


def test_quota_429_is_one_teacher_error_and_the_upload_is_deleted(api_key, tmp_path):
    with FakeGemini(answer, quota_tokens=150) as fake:
        with pytest.raises(TeacherError, match="HTTP 429 RESOURCE_EXHAUSTED: Enqueued token limit"):
            run_stage(fake, tmp_path, max_requests_per_job=3)
        assert len(fake.jobs) == 1
        assert fake.deleted == ["files/in2"]


def test_queued_token_cap_submits_later_jobs_as_earlier_ones_finish(api_key, tmp_path):
    with FakeGemini(answer, quota_tokens=150) as fake:
        replies = run_stage(fake, tmp_path, max_requests_per_job=3, max_queued_tokens=120)
        assert fake.job_keys() == [KEYS[:3], KEYS[3:]]
        assert fake.deleted == []
    assert all(r.finish_reason == "stop" for r in replies.values())


def test_503_on_download_is_retried(api_key, tmp_path):
    with FakeGemini(answer, download_503=1) as fake:
        replies = run_stage(fake, tmp_path)
    assert fake.calls.count("GET /v1beta/files/batch-b1:download") == 2
    assert all(r.finish_reason == "stop" for r in replies.values())


def gemini_cli(fake, tmp_path, *extra):
    args = [
        "experiment=tiny",
        f"out_dir={tmp_path}",
        "teacher=gemini",
        "confirm=true",
        f"gemini.base_url={fake.url}",
        "gemini.poll_initial_s=0.001",
        "~datasets.medium",
        "~datasets.hard",
        "datasets.easy.train.size=10",
    ]
    return data.main([*args, *extra])


def test_cli_repeated_job_failure_exits_non_zero_with_one_line(api_key, tmp_path, capsys):
    reason = "thinking_budget 0 is not supported by this model"
    with FakeGemini(answer, fail_jobs={1: reason, 2: reason}) as fake:
        assert gemini_cli(fake, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: gemini cot: batch job batches/b2 failed like") and reason in err
    assert "\n" not in err
    assert not (tmp_path / "tiny/easy/cot_train.jsonl").exists()


def test_cli_stage_that_keeps_nothing_exits_non_zero_with_one_line(api_key, tmp_path, capsys):
    class EveryKey(dict):
        def get(self, key, default=None):
            return 99

    with FakeGemini(answer, error_keys=EveryKey()) as fake:
        assert gemini_cli(fake, tmp_path, "gemini.max_rounds=1") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: easy cot: kept 0 of 10 (min_kept_share=0.1); dropped: cot_teacher_error 10; "
        "most common teacher error: line error: internal error (after 1 error(s))"
    )
    assert not (tmp_path / "tiny/easy/cot_train.jsonl").exists()


def test_non_interactive_run_without_confirm_submits_nothing(api_key, tmp_path, capsys):
    with FakeGemini(answer) as fake:
        with pytest.raises(TeacherError, match="pass confirm=true"):
            BatchRun(config(fake), "cot", tmp_path, confirm=False).run(requests())
        assert fake.uploads == {}
    assert "gemini gemini-2.5-flash cot: 5 requests in 1 job(s)" in capsys.readouterr().out


def test_missing_api_key_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(TeacherError, match="set GEMINI_API_KEY"):
        BatchRun(GeminiConfig(), "cot", tmp_path, confirm=True).run(requests())


def test_plan_jobs_respects_byte_and_token_caps():
    lines = ["x" * 99] * 5  # 100 bytes with the newline, 25 tokens at 4 chars per token
    assert plan_jobs(lines, GeminiConfig(max_bytes_per_job=250)) == [[0, 1], [2, 3], [4]]
    assert plan_jobs(lines, GeminiConfig(max_tokens_per_job=75)) == [[0, 1, 2], [3, 4]]
    with pytest.raises(TeacherError, match=r"request 0 .* exceeds"):
        plan_jobs(lines, GeminiConfig(max_bytes_per_job=50))


def test_cost_estimate_applies_the_batch_discount():
    cfg = GeminiConfig(
        price_input_per_mtok=1.0,
        price_output_per_mtok=10.0,
        expected_output_tokens={"cot": 100},
        generation_config={"maxOutputTokens": 1000, "thinkingConfig": {"thinkingBudget": 0}},
    )
    est = estimate_cost(["y" * 400] * 10, jobs=1, stage="cot", cfg=cfg)
    assert (est.input_tokens, est.output_tokens, est.output_tokens_max) == (1000, 1000, 10000)
    assert est.usd == pytest.approx((1000 * 1.0 + 1000 * 10.0) / 1e6 * 0.5)
    assert est.usd_max == pytest.approx((1000 * 1.0 + 10000 * 10.0) / 1e6 * 0.5)


@pytest.mark.parametrize(("thinking", "per_output"), [({"thinkingBudget": 300}, 400), ({}, 600)])
def test_cost_estimate_counts_thinking_tokens_as_output(thinking, per_output):
    cfg = GeminiConfig(
        expected_output_tokens={"cot": 100},
        expected_thinking_tokens=500,
        generation_config={"thinkingConfig": thinking},
    )
    assert (
        estimate_cost(["y" * 40] * 2, jobs=1, stage="cot", cfg=cfg).output_tokens == 2 * per_output
    )


def test_request_line_is_a_keyed_generate_content_request():
    row = json.loads(request_line(TeacherRequest("k", "sys", "user"), {"temperature": 0.0}))
    assert row == {
        "key": "k",
        "request": {
            "systemInstruction": {"parts": [{"text": "sys"}]},
            "contents": [{"role": "user", "parts": [{"text": "user"}]}],
            "generationConfig": {"temperature": 0.0},
        },
    }


def test_response_parsing_maps_finish_reasons_and_skips_thoughts():
    response = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "hmm", "thought": True},
                        {"text": "1. a\n"},
                        {"text": "#### 2"},
                    ]
                },
                "finishReason": "MAX_TOKENS",
            }
        ],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3},
    }
    reply = reply_from_response("k", response)
    assert (reply.text, reply.finish_reason, reply.input_tokens, reply.output_tokens) == (
        "1. a\n#### 2",
        "length",
        7,
        3,
    )
    blocked = reply_from_response("k", {"promptFeedback": {"blockReason": "SAFETY"}})
    assert (blocked.text, blocked.finish_reason, blocked.error) == (
        None,
        "blocked",
        "prompt blocked: SAFETY",
    )
    assert parse_result_line('{"key": "k", "response": {"candidates": [') is None
    assert parse_result_line('{"response": {}}') is None
    assert (
        parse_result_line('{"key": "k", "error": {"message": "quota"}}').error
        == "line error: quota"
    )
