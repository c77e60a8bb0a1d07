"""Gemini teacher through the Batch API (official ``google-genai`` SDK, pinned 3.3.0).

One stage (all CoT requests, or all CoD requests, of one difficulty) is a batch run:

1. every request becomes a JSONL line ``{"key": <problem id>, "request": <GenerateContentRequest>}``;
2. lines are packed into jobs under the request / byte / token caps (:func:`plan_jobs`);
3. the cost is estimated (tokens x price x batch discount) and must be confirmed
   (``confirm=true`` for non-interactive runs);
4. each job file is uploaded (``client.files.upload``, explicit ``mime_type``) and
   submitted (``client.batches.create``); the job name is checkpointed at once;
5. jobs are polled (``client.batches.get``) with exponential backoff until a terminal
   state; results are downloaded (``client.files.download``) and joined on ``key``;
6. keys without a result (FAILED / EXPIRED / CANCELLED jobs, per-line errors, malformed
   lines) are resubmitted, alone, up to ``max_rounds`` submissions per key.

The checkpoint (``<work_dir>/<stage>/state.json``) holds job names, states and every
harvested reply, keyed by a digest of the request; an interrupted run polls the jobs it
already paid for instead of submitting them again. To abandon running jobs::

    python -m train.teachers.gemini cancel data/<experiment>/<difficulty>/teacher/<stage>/state.json \\
        experiment=<experiment> [gemini.base_url=...]

The API key comes only from ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` and is never
written to logs, checkpoints or outputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from train.formats import CodBounds
from train.teachers.base import PromptedTeacher, Reply, TeacherPrompts, TeacherRequest

log = logging.getLogger(__name__)

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


class TeacherError(RuntimeError):
    """A Gemini run that cannot go on; the message says what to do."""


class BatchWaitTimeout(TeacherError):
    """Jobs still running when this process stopped waiting; re-running resumes them."""


@dataclass
class GeminiConfig:
    """Gemini Batch API settings (``gemini.*`` in ``conf/data/common.yaml``)."""

    model: str = "gemini-2.5-flash"
    api_version: str = "v1beta"  # the Batch API lives in v1beta; the SDK default is v1
    base_url: str | None = None  # None = Google's endpoint
    upload_mime_type: str = "jsonl"
    generation_config: dict[str, Any] = field(default_factory=dict)  # GenerationConfig JSON
    max_requests_per_job: int = 5000
    max_bytes_per_job: int = 100_000_000  # the input file cap is 2 GB
    max_tokens_per_job: int = 5_000_000  # estimated input tokens enqueued by one job
    max_rounds: int = 3  # submissions per key before it becomes an error reply
    poll_initial_s: float = 15.0
    poll_max_s: float = 300.0
    wait_timeout_s: float = 86_400.0  # then stop waiting; jobs keep running, re-run resumes
    chars_per_token: float = 4.0  # token estimate for caps and cost
    expected_output_tokens: dict[str, int] = field(default_factory=lambda: {"cot": 400, "cod": 60})
    price_input_per_mtok: float = 0.30  # USD per 1M tokens at standard (interactive) price
    price_output_per_mtok: float = 2.50
    batch_discount: float = 0.5  # batch jobs cost half


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
    for i, line in enumerate(lines):
        line_bytes = len(line.encode()) + 1
        line_tokens = estimate_tokens(line, cfg.chars_per_token)
        if line_bytes > cfg.max_bytes_per_job or line_tokens > cfg.max_tokens_per_job:
            raise TeacherError(
                f"request {i} ({line_bytes} bytes, ~{line_tokens} tokens) exceeds gemini.max_bytes_per_job="
                f"{cfg.max_bytes_per_job} or gemini.max_tokens_per_job={cfg.max_tokens_per_job}"
            )
        full = jobs and (
            len(jobs[-1]) >= cfg.max_requests_per_job
            or size + line_bytes > cfg.max_bytes_per_job
            or tokens + line_tokens > cfg.max_tokens_per_job
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
    """Estimated batch price: (input x in-price + output x out-price) x batch discount."""
    input_tokens = sum(estimate_tokens(line, cfg.chars_per_token) for line in lines)
    per_output = cfg.expected_output_tokens.get(stage, 0)
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
    """A GenerateContentResponse (REST JSON) as a Reply; thought parts are left out."""
    usage = response.get("usageMetadata") or {}
    tokens = {
        "input_tokens": usage.get("promptTokenCount"),
        "output_tokens": usage.get("candidatesTokenCount"),
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {
            "jobs": self.jobs,
            "replies": self.replies,
            "errors": self.errors,
            "malformed_lines": self.malformed_lines,
        }
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False))
        os.replace(tmp, self.path)

    def reply(self, key: str, digest: str) -> Reply | None:
        stored = self.replies.get(key)
        return Reply(**stored["reply"]) if stored and stored["digest"] == digest else None

    def open_jobs(self) -> list[dict[str, Any]]:
        return [job for job in self.jobs if not job["harvested"]]

    def submissions(self, key: str, digest: str) -> int:
        return sum(job["keys"].get(key) == digest for job in self.jobs)

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
    """A ``google.genai.Client`` with the configured endpoint, API version and retries."""
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        api_version=cfg.api_version,
        base_url=cfg.base_url,
        retry_options=types.HttpRetryOptions(attempts=5),
    )
    return genai.Client(api_key=api_key_from_env(), http_options=options)


class BatchRun:
    """One stage through the Batch API, resumable from its checkpoint."""

    def __init__(
        self,
        cfg: GeminiConfig,
        stage: str,
        work_dir: Path,
        confirm: bool,
    ) -> None:
        self.cfg = cfg
        self.stage = stage
        self.dir = work_dir / stage
        self.checkpoint = Checkpoint(self.dir / "state.json")
        self.confirmed = confirm
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
        deadline = time.monotonic() + self.cfg.wait_timeout_s
        ck = self.checkpoint
        while True:
            self._finish_open_jobs(deadline)
            todo = [
                key
                for key, digest in digests.items()
                if ck.reply(key, digest) is None
                and not ck.in_flight(key, digest)
                and ck.submissions(key, digest) < self.cfg.max_rounds
            ]
            if not todo:
                break
            self._submit([lines[k] for k in todo], {k: digests[k] for k in todo})
        return {key: ck.reply(key, digest) or self._failure(key) for key, digest in digests.items()}

    def _failure(self, key: str) -> Reply:
        errors = self.checkpoint.errors.get(key) or ["no result"]
        return Reply(key, None, "error", error=f"{errors[-1]} (after {len(errors)} error(s))")

    def _submit(self, lines: list[str], digests: dict[str, str]) -> None:
        round_no = 1 + max((job["round"] for job in self.checkpoint.jobs), default=0)
        plan = plan_jobs(lines, self.cfg)
        estimate = estimate_cost(lines, len(plan), self.stage, self.cfg)
        print(format_estimate(estimate, self.cfg.model, self.stage), flush=True)
        self._confirm()
        keys = list(digests)
        for i, indices in enumerate(plan):
            path = self.dir / f"round{round_no}-job{i}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(lines[j] + "\n" for j in indices), encoding="utf-8")
            uploaded = self.client.files.upload(
                file=str(path),
                config={"mime_type": self.cfg.upload_mime_type, "display_name": path.stem},
            )
            job = self.client.batches.create(
                model=self.cfg.model,
                src=uploaded.name,
                config={"display_name": f"{self.stage}-{path.stem}"},
            )
            self.checkpoint.jobs.append(
                {
                    "name": job.name,
                    "round": round_no,
                    "file": uploaded.name,
                    "state": _state_name(job.state),
                    "harvested": False,
                    "keys": {keys[j]: digests[keys[j]] for j in indices},
                }
            )
            self.checkpoint.save()
            log.info("submitted %s (%d requests, round %d)", job.name, len(indices), round_no)

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

    def _finish_open_jobs(self, deadline: float) -> None:
        for job in self.checkpoint.open_jobs():
            state, dest = self._wait(job, deadline)
            self._harvest(job, state, dest)

    def _wait(self, job: dict[str, Any], deadline: float) -> tuple[str, str | None]:
        delay = self.cfg.poll_initial_s
        while True:
            batch = self.client.batches.get(name=job["name"])
            state = _state_name(batch.state)
            if state != job["state"]:
                job["state"] = state
                self.checkpoint.save()
                log.info("%s: %s", job["name"], state)
            if state in TERMINAL_STATES:
                return state, batch.dest.file_name if batch.dest else None
            if time.monotonic() + delay > deadline:
                raise BatchWaitTimeout(
                    f"batch job {job['name']} still {state} after gemini.wait_timeout_s="
                    f"{self.cfg.wait_timeout_s}; re-run the same command to resume from {self.checkpoint.path}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, self.cfg.poll_max_s)

    def _harvest(self, job: dict[str, Any], state: str, dest: str | None) -> None:
        ck = self.checkpoint
        seen: set[str] = set()
        if dest is not None:
            content = self.client.files.download(file=dest).decode("utf-8")
            for raw in content.splitlines():
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
        for key in job["keys"].keys() - seen:
            reason = "missing from the results file" if dest else "no results file"
            ck.errors.setdefault(key, []).append(f"job {job['name']} {state}: {reason}")
        job["harvested"] = True
        ck.save()


def _state_name(state: Any) -> str:
    return getattr(state, "value", None) or str(state)


def cancel_jobs(checkpoint_path: Path, cfg: GeminiConfig) -> list[str]:
    """Cancel the running jobs of a checkpoint; the next run harvests them and resubmits."""
    ck = Checkpoint(checkpoint_path)
    client = make_client(cfg)
    cancelled = []
    for job in ck.open_jobs():
        if job["state"] in TERMINAL_STATES:
            continue
        client.batches.cancel(name=job["name"])
        job["state"] = _state_name(client.batches.get(name=job["name"]).state)
        cancelled.append(job["name"])
    ck.save()
    return cancelled


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
    ) -> None:
        super().__init__(prompts, bounds)
        self.cfg = cfg
        self.model = cfg.model
        self.work_dir = work_dir
        self.confirm = confirm

    def complete(self, requests: Sequence[TeacherRequest], stage: str) -> dict[str, Reply]:
        return BatchRun(self.cfg, stage, self.work_dir, self.confirm).run(requests)


def main(argv: list[str]) -> int:
    """``cancel <state.json> [data overrides]``: cancel the running jobs of a checkpoint."""
    if len(argv) < 2 or argv[0] != "cancel":
        print(__doc__)
        return 2
    from harness.config import ConfigError
    from train.data_config import compose_data_config

    try:
        cfg = compose_data_config(argv[2:]).gemini
        for name in cancel_jobs(Path(argv[1]), cfg):
            print(f"cancelled {name}")
    except (ConfigError, TeacherError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main(sys.argv[1:]))
