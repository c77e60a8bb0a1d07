"""Gemini teacher through the Batch API (official ``google-genai`` SDK, pinned 3.3.0).

One stage (all CoT, or all CoD, requests of one difficulty) is a batch run: JSONL lines
packed into jobs (:func:`plan_jobs`), a confirmed cost estimate, jobs submitted under
``max_queued_tokens`` and checkpointed, polled, results joined on ``key``, missing keys
resubmitted. The checkpoint (``<work_dir>/<stage>/state.json``) lets an interrupted run
poll the jobs it paid for; ``python -m train.data cancel`` abandons them. API errors are
one-line :class:`TeacherError` messages; the API key comes only from the environment. Each
step and failure mode: docs/RUNBOOK.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.files import write_text
from train.data_config import GeminiConfig
from train.formats import CodBounds
from train.teachers.base import PromptedTeacher, Reply, TeacherPrompts, TeacherRequest

log = logging.getLogger(__name__)
T = TypeVar("T")

TERMINAL_STATES = (
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
)
_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
}  # anything else (SAFETY, RECITATION, ...) is blocked
TRANSIENT_CODES = (408, 500, 502, 503, 504)  # the request may or may not have taken effect
NO_RETRY = {"retry_options": {"attempts": 1}}  # per-request http_options


class TeacherError(RuntimeError):
    """A Gemini run that cannot go on; the message says what to do."""


class BatchWaitTimeout(TeacherError):
    """Jobs still running when this process stopped waiting; re-running resumes them."""


class GeminiApiError(TeacherError):
    """An API call that failed; ``transient`` when retrying may succeed."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def api_call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with SDK and transport errors as one-line ``GeminiApiError``s."""
    import httpx
    from google.genai import errors

    try:
        return fn(*args, **kwargs)
    except errors.APIError as exc:
        hint = (
            "; lower gemini.max_queued_tokens or wait for running jobs" if exc.code == 429 else ""
        )
        raise GeminiApiError(
            f"gemini {what}: HTTP {exc.code} {exc.status}: {exc.message}{hint}",
            exc.code in TRANSIENT_CODES,
        ) from None
    except httpx.TransportError as exc:
        raise GeminiApiError(f"gemini {what}: {type(exc).__name__}: {exc}", True) from None


# ----------------------------------------------------------------------------- requests


def request_line(request: TeacherRequest, generation_config: dict[str, Any]) -> str:
    """The JSONL line of one request in the Batch API's file-input format."""
    body: dict[str, Any] = {
        "systemInstruction": {"parts": [{"text": request.system}]},
        "contents": [{"role": "user", "parts": [{"text": request.user}]}],
    }
    if generation_config:
        body["generationConfig"] = generation_config
    return json.dumps({"key": request.key, "request": body}, ensure_ascii=False)


def line_digest(model: str, line: str) -> str:
    """Identity of a request in the checkpoint: a reply is reused only for the same digest."""
    return hashlib.sha256(f"{model}\n{line}".encode()).hexdigest()[:20]


def estimate_tokens(text: str, chars_per_token: float) -> int:
    return math.ceil(len(text) / chars_per_token)


def plan_jobs(lines: Sequence[str], cfg: GeminiConfig) -> list[list[int]]:
    """Pack line indices, in order, into jobs that stay under every cap.

    Raises:
        TeacherError: a single request larger than a per-job cap.
    """
    jobs: list[list[int]] = []
    size = tokens = 0
    max_tokens = min(cfg.max_tokens_per_job, cfg.max_queued_tokens)
    for i, line in enumerate(lines):
        line_bytes = len(line.encode()) + 1
        line_tokens = estimate_tokens(line, cfg.chars_per_token)
        if line_bytes > cfg.max_bytes_per_job or line_tokens > max_tokens:
            raise TeacherError(
                f"request {i} ({line_bytes} bytes, ~{line_tokens} tokens) exceeds gemini.max_bytes_per_job="
                f"{cfg.max_bytes_per_job} or gemini.max_tokens_per_job / max_queued_tokens={max_tokens}"
            )
        full = jobs and (
            len(jobs[-1]) >= cfg.max_requests_per_job
            or size + line_bytes > cfg.max_bytes_per_job
            or tokens + line_tokens > max_tokens
        )
        if not jobs or full:
            jobs.append([])
            size = tokens = 0
        jobs[-1].append(i)
        size += line_bytes
        tokens += line_tokens
    return jobs


@dataclass(frozen=True)
class CostEstimate:
    """Tokens and USD for one submission; ``*_max`` assumes every output hits the cap."""

    requests: int
    jobs: int
    input_tokens: int
    output_tokens: int
    output_tokens_max: int
    usd: float
    usd_max: float


def estimate_cost(lines: Sequence[str], jobs: int, stage: str, cfg: GeminiConfig) -> CostEstimate:
    """Estimated batch price: (input x in-price + output x out-price) x batch discount.

    With thinking on (``thinkingBudget`` absent or not 0), each output also carries the
    thinking budget (or ``expected_thinking_tokens`` when the budget is dynamic).
    """
    input_tokens = sum(estimate_tokens(line, cfg.chars_per_token) for line in lines)
    per_output = cfg.expected_output_tokens.get(stage, 0)
    budget = (cfg.generation_config.get("thinkingConfig") or {}).get("thinkingBudget")
    if budget != 0:
        per_output += budget if budget is not None and budget > 0 else cfg.expected_thinking_tokens
    cap = int(cfg.generation_config.get("maxOutputTokens", per_output))
    output_tokens, output_max = per_output * len(lines), max(cap, per_output) * len(lines)

    def usd(out: int) -> float:
        return (
            (input_tokens * cfg.price_input_per_mtok + out * cfg.price_output_per_mtok)
            / 1e6
            * cfg.batch_discount
        )

    return CostEstimate(
        len(lines),
        jobs,
        input_tokens,
        output_tokens,
        output_max,
        usd(output_tokens),
        usd(output_max),
    )


def format_estimate(est: CostEstimate, model: str, stage: str) -> str:
    return (
        f"gemini {model} {stage}: {est.requests} requests in {est.jobs} job(s), ~{est.input_tokens:,} input + "
        f"~{est.output_tokens:,} output tokens -> ~${est.usd:.2f} (at most ${est.usd_max:.2f} if every "
        f"output hits maxOutputTokens), batch price"
    )


# ----------------------------------------------------------------------------- results


def reply_from_response(key: str, response: dict[str, Any]) -> Reply:
    """A GenerateContentResponse (REST JSON) as a Reply; thought parts are left out of the
    text, thought tokens are counted in ``output_tokens`` (they are billed as output)."""
    usage = response.get("usageMetadata") or {}
    counted = [usage[k] for k in ("candidatesTokenCount", "thoughtsTokenCount") if k in usage]
    tokens = {
        "input_tokens": usage.get("promptTokenCount"),
        "output_tokens": sum(counted) if counted else None,
    }
    candidates = response.get("candidates") or []
    if not candidates:
        reason = (response.get("promptFeedback") or {}).get("blockReason", "no candidates")
        return Reply(key, None, "blocked", error=f"prompt blocked: {reason}", **tokens)
    candidate = candidates[0]
    parts = (candidate.get("content") or {}).get("parts") or []
    text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
    finish = _FINISH.get(candidate.get("finishReason", "STOP"), "blocked")
    error = None if finish != "blocked" else f"finishReason {candidate.get('finishReason')}"
    return Reply(key, text, finish, error=error, **tokens)


@dataclass(frozen=True)
class ResultLine:
    """One parsed line of a results file: a reply, or an error for ``key``."""

    key: str
    reply: Reply | None
    error: str | None


def parse_result_line(line: str) -> ResultLine | None:
    """A results-file line, or None when it is malformed (no JSON object, no key)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("key"), str):
        return None
    key = row["key"]
    status = row.get("error") or row.get("status")
    if status:
        message = status.get("message", str(status)) if isinstance(status, dict) else str(status)
        return ResultLine(key, None, f"line error: {message}")
    response = row.get("response")
    if not isinstance(response, dict):
        return None
    return ResultLine(key, reply_from_response(key, response), None)


# ----------------------------------------------------------------------------- checkpoint


class Checkpoint:
    """The on-disk state of one stage: jobs, harvested replies, errors (atomic JSON)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text()) if path.exists() else {}
        self.jobs: list[dict[str, Any]] = data.get("jobs", [])
        self.replies: dict[str, dict[str, Any]] = data.get("replies", {})
        self.errors: dict[str, list[str]] = data.get("errors", {})
        self.malformed_lines: int = data.get("malformed_lines", 0)

    def save(self) -> None:
        data = {
            "jobs": self.jobs,
            "replies": self.replies,
            "errors": self.errors,
            "malformed_lines": self.malformed_lines,
        }
        write_text(self.path, json.dumps(data, indent=1, ensure_ascii=False))

    def reply(self, key: str, digest: str) -> Reply | None:
        stored = self.replies.get(key)
        return Reply(**stored["reply"]) if stored and stored["digest"] == digest else None

    def open_jobs(self) -> list[dict[str, Any]]:
        return [job for job in self.jobs if not job["harvested"]]

    def submissions(self, key: str, digest: str) -> int:
        """Rounds ``key`` used; an expired job (never run by the service) uses none."""
        return sum(
            job["keys"].get(key) == digest and job["state"] != "JOB_STATE_EXPIRED"
            for job in self.jobs
        )

    def in_flight(self, key: str, digest: str) -> bool:
        return any(job["keys"].get(key) == digest for job in self.open_jobs())


# ----------------------------------------------------------------------------- the runner


def api_key_from_env() -> str:
    """The API key from ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``."""
    key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
    if not key:
        raise TeacherError(
            "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment"
        )
    return key


def make_client(cfg: GeminiConfig) -> Any:
    """A ``google.genai.Client`` for the Gemini API (never Vertex), endpoint, version, retries."""
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        api_version=cfg.api_version,
        base_url=cfg.base_url,
        retry_options=types.HttpRetryOptions(attempts=5),
    )
    return genai.Client(vertexai=False, api_key=api_key_from_env(), http_options=options)


class BatchRun:
    """One stage through the Batch API, resumable from its checkpoint."""

    def __init__(
        self,
        cfg: GeminiConfig,
        stage: str,
        work_dir: Path,
        confirm: bool,
        label: str = "draftbench",
    ) -> None:
        self.cfg = cfg
        self.stage = stage
        self.label = label  # display names: <label>-<stage>-r<round>-j<job>-<content hash>
        self.dir = work_dir / stage
        self.checkpoint = Checkpoint(self.dir / "state.json")
        self.confirmed = confirm
        self._announced: set[str] = set()  # keys whose cost this process has printed
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The SDK client, made on first use (a fully harvested resume needs no key)."""
        if self._client is None:
            self._client = make_client(self.cfg)
        return self._client

    def run(self, requests: Sequence[TeacherRequest]) -> dict[str, Reply]:
        """Replies for every request: harvested, resumed or freshly submitted."""
        lines = {r.key: request_line(r, self.cfg.generation_config) for r in requests}
        if len(lines) != len(requests):
            raise TeacherError(f"gemini {self.stage}: duplicate request keys")
        digests = {key: line_digest(self.cfg.model, line) for key, line in lines.items()}
        ck = self.checkpoint
        while True:
            todo = [
                key
                for key, digest in digests.items()
                if ck.reply(key, digest) is None
                and not ck.in_flight(key, digest)
                and ck.submissions(key, digest) < self.cfg.max_rounds
            ]
            if todo:
                self._submit(todo, lines, digests)
            running = ck.open_jobs()
            if not running:
                break
            job = running[0]
            self._harvest(job, self._wait(job))
        return {key: ck.reply(key, digest) or self._failure(key) for key, digest in digests.items()}

    def _failure(self, key: str) -> Reply:
        errors = self.checkpoint.errors.get(key) or ["no result"]
        return Reply(key, None, "error", error=f"{errors[-1]} (after {len(errors)} error(s))")

    def _submit(self, keys: list[str], lines: dict[str, str], digests: dict[str, str]) -> None:
        """Submit ``keys`` in jobs while the stage's queued tokens stay under the cap."""
        cfg, ck = self.cfg, self.checkpoint
        texts = [lines[k] for k in keys]
        plan = plan_jobs(texts, cfg)
        if not self._announced.issuperset(keys):
            estimate = estimate_cost(texts, len(plan), self.stage, cfg)
            print(format_estimate(estimate, cfg.model, self.stage), flush=True)
            self._confirm()
            self._announced.update(keys)
        round_no = 1 + max((job["round"] for job in ck.jobs), default=0)
        queued = sum(job.get("tokens", 0) for job in ck.open_jobs())
        for i, indices in enumerate(plan):
            tokens = sum(estimate_tokens(texts[j], cfg.chars_per_token) for j in indices)
            if queued and queued + tokens > cfg.max_queued_tokens:
                log.info(
                    "%d request(s) wait for running jobs (gemini.max_queued_tokens=%d)",
                    sum(map(len, plan[i:])),
                    cfg.max_queued_tokens,
                )
                return
            job = {"round": round_no, "tokens": tokens}
            job["keys"] = {keys[j]: digests[keys[j]] for j in indices}
            self._submit_job(f"round{round_no}-job{i}", [texts[j] for j in indices], job)
            queued += tokens

    def _submit_job(self, stem: str, texts: list[str], job: dict[str, Any]) -> None:
        """Upload one job file, create its batch job and checkpoint ``job`` (round, tokens,
        keys) with the job's name; the uploaded file is deleted if creation fails."""
        path = self.dir / f"{stem}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        content = "".join(text + "\n" for text in texts)
        path.write_text(content, encoding="utf-8")
        digest = hashlib.sha256(content.encode()).hexdigest()[:8]
        display_name = f"{self.label}-{self.stage}-{stem}-{digest}"
        uploaded = api_call(
            f"upload {path.name}",
            self.client.files.upload,
            file=str(path),
            config={"mime_type": self.cfg.upload_mime_type, "display_name": path.stem},
        )
        try:
            batch = self._retry(
                f"create {display_name}",
                self.cfg.create_attempts,
                lambda: self.client.batches.create(
                    model=self.cfg.model,
                    src=uploaded.name,
                    config={"display_name": display_name, "http_options": NO_RETRY},
                ),
                lambda: self._find_job(display_name),
            )
        except TeacherError:
            self._delete_file(uploaded.name)
            raise
        job |= {
            "name": batch.name,
            "display_name": display_name,
            "file": uploaded.name,
            "state": _state_name(batch.state),
            "harvested": False,
        }
        self.checkpoint.jobs.append(job)
        self.checkpoint.save()
        log.info("submitted %s (%s, %d requests)", batch.name, display_name, len(texts))

    def _retry(
        self,
        what: str,
        attempts: int,
        call: Callable[[], T],
        recover: Callable[[], T | None] = lambda: None,
    ) -> T:
        """``call`` up to ``attempts`` times on transient errors; ``recover`` may find the
        effect of an attempt whose answer was lost (then it is returned instead)."""
        for attempt in range(1, attempts):
            try:
                return api_call(what, call)
            except GeminiApiError as exc:
                if not exc.transient:
                    raise
                log.warning("%s (attempt %d of %d)", exc, attempt, attempts)
            found = recover()
            if found is not None:
                return found
            time.sleep(min(self.cfg.poll_initial_s * 2 ** (attempt - 1), self.cfg.poll_max_s))
        return api_call(what, call)

    def _find_job(self, display_name: str) -> Any:
        """The batch job created under ``display_name``, or None."""
        pager = api_call("list batches", self.client.batches.list, config={"page_size": 100})
        for batch in pager:
            if batch.display_name == display_name:
                log.info("found %s created as %s despite the error", batch.name, display_name)
                return batch
        return None

    def _delete_file(self, name: str) -> None:
        try:
            api_call(f"delete {name}", self.client.files.delete, name=name)
        except TeacherError as exc:
            log.warning("%s (the uploaded file stays until it expires)", exc)

    def _confirm(self) -> None:
        if self.confirmed:
            return
        if not sys.stdin.isatty():
            raise TeacherError(
                "not submitting: pass confirm=true to accept the cost estimate non-interactively"
            )
        if input("submit? [y/N] ").strip().lower() not in ("y", "yes"):
            raise TeacherError("not submitting: cancelled at the cost prompt")
        self.confirmed = True

    def _wait(self, job: dict[str, Any]) -> Any:
        """The job once terminal, polled with backoff for at most ``wait_timeout_s``."""
        deadline = time.monotonic() + self.cfg.wait_timeout_s
        delay = self.cfg.poll_initial_s
        while True:
            batch = api_call(f"get {job['name']}", self.client.batches.get, name=job["name"])
            state = _state_name(batch.state)
            if state != job["state"]:
                job["state"] = state
                self.checkpoint.save()
                log.info("%s: %s", job["name"], state)
            if state in TERMINAL_STATES:
                return batch
            if time.monotonic() + delay > deadline:
                raise BatchWaitTimeout(
                    f"batch job {job['name']} still {state} after gemini.wait_timeout_s="
                    f"{self.cfg.wait_timeout_s}; re-run the same command to resume from {self.checkpoint.path}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, self.cfg.poll_max_s)

    def _harvest(self, job: dict[str, Any], batch: Any) -> None:
        """Record the replies and errors of a finished job.

        Raises:
            TeacherError: the job FAILED with the same reason as an earlier job for its keys.
        """
        ck = self.checkpoint
        name, state = job["name"], job["state"]
        dest = batch.dest.file_name if batch.dest else None
        seen: set[str] = set()
        if dest is not None:
            content = self._retry(
                f"download {dest}",
                self.cfg.download_attempts,
                lambda: self.client.files.download(file=dest),
            ).decode("utf-8")
            for raw in content.split("\n"):  # not splitlines(): model text may hold U+2028
                if not raw.strip():
                    continue
                parsed = parse_result_line(raw)
                if parsed is None or parsed.key not in job["keys"]:
                    ck.malformed_lines += 1
                    continue
                seen.add(parsed.key)
                if parsed.reply is not None:
                    ck.replies[parsed.key] = {
                        "digest": job["keys"][parsed.key],
                        "reply": parsed.reply.to_row(),
                    }
                else:
                    ck.errors.setdefault(parsed.key, []).append(str(parsed.error))
        repeated = False
        if state == "JOB_STATE_FAILED":
            job["error"] = self._failure_reason(name)
            log.warning("%s FAILED: %s", name, job["error"])
            repeated = any(
                other is not job
                and other.get("error") == job["error"]
                and other["keys"].keys() & job["keys"].keys()
                for other in ck.jobs
            )
            reason = f"failed: {job['error']}"
        else:
            reason = "missing from the results file" if dest else "no results file"
        for key in job["keys"].keys() - seen:
            ck.errors.setdefault(key, []).append(f"job {name} {state}: {reason}")
        job["harvested"] = True
        ck.save()
        if repeated:
            raise TeacherError(
                f"gemini {self.stage}: batch job {name} failed like an earlier job for the same "
                f"requests ({job['error']}); fix the request or the gemini.* settings, then re-run"
            )

    def _failure_reason(self, name: str) -> str:
        """A FAILED job's error, read from its raw response (the SDK drops it for this API)."""
        response = api_call(f"get {name}", self.client._api_client.request, "get", name, {})
        operation = json.loads(response.body or "{}")
        metadata = operation.get("metadata") or {}
        error = operation.get("error") or metadata.get("error") or {}
        if metadata.get("batchStats"):
            log.warning("%s batchStats: %s", name, metadata["batchStats"])
        words = [str(error[k]) for k in ("status", "message") if error.get(k)]
        return " ".join(words) or "no error in the job's response"


def _state_name(state: Any) -> str:
    return getattr(state, "value", None) or str(state)


def cancel_jobs(checkpoint_path: Path, cfg: GeminiConfig) -> list[str]:
    """Cancel the unfinished jobs of a checkpoint, one report line per job.

    Each job's state is refreshed first (a finished job is not cancelled) and saved at
    once; the next run harvests what the jobs produced and resubmits the rest.
    """
    if not checkpoint_path.is_file():
        raise TeacherError(f"no checkpoint {checkpoint_path}")
    ck = Checkpoint(checkpoint_path)
    client = make_client(cfg)
    report = []
    for job in ck.open_jobs():
        name = job["name"]
        state = _state_name(api_call(f"get {name}", client.batches.get, name=name).state)
        if state in TERMINAL_STATES:
            line = f"{name}: already {state}"
        else:
            try:
                api_call(f"cancel {name}", client.batches.cancel, name=name)
                line = f"cancelled {name}"
            except TeacherError as exc:
                line = f"{name}: not cancelled ({exc})"
            state = _state_name(api_call(f"get {name}", client.batches.get, name=name).state)
        job["state"] = state
        ck.save()
        report.append(line)
    return report


class GeminiTeacher(PromptedTeacher):
    """CoT and CoD from Gemini through the Batch API (see the module docstring)."""

    name = "gemini"

    def __init__(
        self,
        cfg: GeminiConfig,
        prompts: TeacherPrompts,
        bounds: CodBounds,
        work_dir: Path,
        confirm: bool = False,
        label: str = "draftbench",
    ) -> None:
        super().__init__(prompts, bounds)
        self.cfg = cfg
        self.model = cfg.model
        self.work_dir = work_dir
        self.confirm = confirm
        self.label = label

    def complete(self, requests: Sequence[TeacherRequest], stage: str) -> dict[str, Reply]:
        return BatchRun(self.cfg, stage, self.work_dir, self.confirm, self.label).run(requests)
