"""The Gemini Batch API teacher, run with the real google-genai client against a local fake."""

import json
import logging

import pytest
from fake_gemini import API_KEY, FakeGemini

from train.teachers.base import TeacherRequest
from train.teachers.gemini import (
    BatchRun,
    BatchWaitTimeout,
    GeminiConfig,
    TeacherError,
    cancel_jobs,
    estimate_cost,
    main,
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
    with FakeGemini(answer, fail_jobs={1}) as fake:
        replies = run_stage(fake, tmp_path, max_requests_per_job=3)
    assert fake.job_keys() == [["p0", "p1", "p2"], ["p3", "p4"], ["p0", "p1", "p2"]]
    assert all(r.text and r.text.endswith(r.key) for r in replies.values())
    state = json.loads((tmp_path / "cot" / "state.json").read_text())
    assert [job["state"] for job in state["jobs"]] == [
        "JOB_STATE_FAILED",
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_SUCCEEDED",
    ]
    assert "JOB_STATE_FAILED: no results file" in state["errors"]["p0"][0]


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


def test_cancel_cli_stops_running_jobs_and_records_their_state(api_key, tmp_path, capsys):
    state_path = tmp_path / "cot" / "state.json"
    with FakeGemini(answer, hold=True) as fake:
        with pytest.raises(BatchWaitTimeout):
            run_stage(fake, tmp_path, wait_timeout_s=0.0)
        assert (
            main(["cancel", str(state_path), "experiment=tiny", f"gemini.base_url={fake.url}"]) == 0
        )
        assert fake.jobs[0].state == "BATCH_STATE_CANCELLED"
        assert cancel_jobs(state_path, config(fake)) == []  # nothing left to cancel
    assert capsys.readouterr().out.splitlines()[-1] == "cancelled batches/b1"
    state = json.loads(state_path.read_text())
    assert state["jobs"][0]["state"] == "JOB_STATE_CANCELLED"


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
        generation_config={"maxOutputTokens": 1000},
    )
    est = estimate_cost(["y" * 400] * 10, jobs=1, stage="cot", cfg=cfg)
    assert (est.input_tokens, est.output_tokens, est.output_tokens_max) == (1000, 1000, 10000)
    assert est.usd == pytest.approx((1000 * 1.0 + 1000 * 10.0) / 1e6 * 0.5)
    assert est.usd_max == pytest.approx((1000 * 1.0 + 10000 * 10.0) / 1e6 * 0.5)


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
