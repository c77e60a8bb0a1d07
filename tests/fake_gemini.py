"""A local stand-in for the Gemini Developer API's file and batch endpoints.

Serves the real ``google-genai`` client on 127.0.0.1 (stdlib ``ThreadingHTTPServer``):
resumable uploads, batch create / get / list / cancel, results download and file delete,
under any API version prefix. Each request line is answered by ``answer(key, request)``;
results are written in reverse order, so callers must join on ``key``. Scenario knobs give
the real service's bad days: FAILED jobs (the reason only in the raw operation), EXPIRED or
CANCELLED ones, damaged results files, 503s and 429s, and jobs held running.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

API_KEY = "fake-test-key-0123456789"
_VERSIONED = re.compile(r"^/(upload/)?(v[0-9a-z]+)/(.+)$")
_ACTIVE = ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING")


@dataclass
class Job:
    name: str
    model: str
    file: str
    keys: list[str]
    requests: list[dict[str, Any]]
    state: str = "BATCH_STATE_PENDING"
    display_name: str = ""
    polls: int = 0
    output: str | None = None


@dataclass
class FakeGemini:
    """The fake service's state, scenario knobs and a log of what the client did."""

    answer: Callable[[str, dict[str, Any]], str]
    fail_jobs: dict[int, str] = field(default_factory=dict)  # 1-based job number -> error
    expire_jobs: set[int] = field(default_factory=set)  # 1-based job numbers that end EXPIRED
    partial_on_cancel: int = 0  # lines a cancelled job's results file holds
    missing_keys: dict[str, int] = field(
        default_factory=dict
    )  # key -> attempts left out of a SUCCEEDED job's results
    extra_fields: bool = False  # result lines and responses carry fields the client ignores
    create_503: int = 0  # creates that make the job, then answer 503
    quota_tokens: int | None = None  # queued tokens (chars / 4) of active jobs, else 429
    download_503: int = 0  # downloads answered 503 first
    error_keys: dict[str, int] = field(
        default_factory=dict
    )  # key -> attempts answered with an error line
    malformed_keys: dict[str, int] = field(
        default_factory=dict
    )  # key -> attempts answered with garbage
    hold: bool = False  # jobs stay RUNNING while set
    polls_to_finish: int = 1  # RUNNING for this many polls first
    uploads: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    upload_mime_types: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # "METHOD path" per API call
    bad_auth: int = 0
    _attempts: dict[str, int] = field(default_factory=dict)
    _sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> FakeGemini:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_DELETE(self) -> None:
                fake._handle(self, "DELETE")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # polled every 10 ms: shutdown() waits out a poll (0.5 s by default) in every test
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.01,), daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def job_keys(self) -> list[list[str]]:
        return [job.keys for job in self.jobs]

    # ------------------------------------------------------------------ dispatch

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock:
            self.calls.append(f"{method} {url.path}")
            if "upload_id" in parse_qs(url.query):
                return self._upload_chunk(h, parse_qs(url.query)["upload_id"][0], body)
            if h.headers.get("x-goog-api-key") != API_KEY:
                self.bad_auth += 1
                return _json(
                    h,
                    401,
                    {"error": {"code": 401, "message": "bad key", "status": "UNAUTHENTICATED"}},
                )
            match = _VERSIONED.match(url.path)
            if match is None:
                return _json(h, 404, {"error": {"code": 404, "message": f"no route {url.path}"}})
            is_upload, version, rest = match.groups()
            if is_upload and rest == "files" and method == "POST":
                return self._upload_start(h, version)
            if method == "POST" and rest.endswith(":batchGenerateContent"):
                return self._create(h, rest.removesuffix(":batchGenerateContent"), json.loads(body))
            if method == "GET" and rest == "batches":
                return _json(h, 200, {"operations": [self._operation(j) for j in self.jobs]})
            if method == "GET" and rest.startswith("batches/"):
                return self._get(h, rest)
            if method == "POST" and rest.startswith("batches/") and rest.endswith(":cancel"):
                return self._cancel(h, rest.removesuffix(":cancel"))
            if method == "GET" and rest.startswith("files/") and rest.endswith(":download"):
                return self._download(h, rest.removesuffix(":download"))
            if method == "DELETE" and rest.startswith("files/"):
                del self.uploads[rest]
                self.deleted.append(rest)
                return _json(h, 200, {})
            return _json(h, 404, {"error": {"code": 404, "message": f"no route {method} {rest}"}})

    # ------------------------------------------------------------------ files

    def _upload_start(self, h: BaseHTTPRequestHandler, version: str) -> None:
        assert h.headers["X-Goog-Upload-Protocol"] == "resumable"
        assert h.headers["X-Goog-Upload-Command"] == "start"
        upload_id = f"u{len(self._sessions) + 1}"
        self._sessions[upload_id] = {
            "size": int(h.headers["X-Goog-Upload-Header-Content-Length"]),
            "mime": h.headers["X-Goog-Upload-Header-Content-Type"],
            "data": b"",
        }
        upload_url = f"{self.url}/upload/{version}/files?upload_id={upload_id}"
        _reply(h, 200, b"", {"X-Goog-Upload-URL": upload_url, "X-Goog-Upload-Status": "active"})

    def _upload_chunk(self, h: BaseHTTPRequestHandler, upload_id: str, body: bytes) -> None:
        session = self._sessions[upload_id]
        if int(h.headers["X-Goog-Upload-Offset"]) != len(session["data"]):
            return _json(h, 400, {"error": {"code": 400, "message": "bad offset"}})
        session["data"] += body
        if "finalize" not in h.headers["X-Goog-Upload-Command"]:
            return _reply(h, 200, b"", {"X-Goog-Upload-Status": "active"})
        assert len(session["data"]) == session["size"]
        name = f"files/in{len(self.uploads) + 1}"
        self.uploads[name] = session["data"]
        self.upload_mime_types.append(session["mime"])
        file = {
            "name": name,
            "mimeType": session["mime"],
            "sizeBytes": str(session["size"]),
            "state": "ACTIVE",
        }
        _reply(h, 200, json.dumps({"file": file}).encode(), {"X-Goog-Upload-Status": "final"})

    def _download(self, h: BaseHTTPRequestHandler, name: str) -> None:
        job = next((j for j in self.jobs if j.output == name), None)
        if job is None:
            return _json(h, 404, {"error": {"code": 404, "message": f"no file {name}"}})
        if self.download_503:
            self.download_503 -= 1
            return _json(h, 503, _status(503, "UNAVAILABLE", "try again"))
        _reply(h, 200, self._results(job), {"Content-Type": "application/octet-stream"})

    # ------------------------------------------------------------------ batches

    def _create(self, h: BaseHTTPRequestHandler, model: str, body: dict[str, Any]) -> None:
        file = body["batch"]["inputConfig"]["fileName"]
        text = self.uploads[file].decode()
        active = [j for j in self.jobs if j.state in _ACTIVE]
        queued = sum(len(self.uploads.get(j.file, b"")) // 4 for j in active)
        if self.quota_tokens is not None and queued + len(text) // 4 > self.quota_tokens:
            message = "Enqueued token limit exceeded for this model"
            return _json(h, 429, _status(429, "RESOURCE_EXHAUSTED", message))
        rows = [json.loads(line) for line in text.split("\n") if line]
        job = Job(
            f"batches/b{len(self.jobs) + 1}",
            model,
            file,
            [r["key"] for r in rows],
            [r["request"] for r in rows],
            display_name=body["batch"].get("displayName", ""),
        )
        self.jobs.append(job)
        if self.create_503:
            self.create_503 -= 1
            return _json(h, 503, _status(503, "UNAVAILABLE", "the service is overloaded"))
        _json(h, 200, self._operation(job))

    def _get(self, h: BaseHTTPRequestHandler, name: str) -> None:
        job = next((j for j in self.jobs if j.name == name), None)
        if job is None:
            return _json(h, 404, {"error": {"code": 404, "message": f"no job {name}"}})
        if job.state in _ACTIVE and not self.hold:
            job.polls += 1
            job.state = "BATCH_STATE_RUNNING"
            if job.polls > self.polls_to_finish:
                self.finish(job)
        _json(h, 200, self._operation(job))

    def _cancel(self, h: BaseHTTPRequestHandler, name: str) -> None:
        job = next(j for j in self.jobs if j.name == name)
        if job.state not in _ACTIVE:
            message = f"Batch {name} is already in a terminal state {job.state}"
            return _json(h, 400, _status(400, "FAILED_PRECONDITION", message))
        job.state = "BATCH_STATE_CANCELLED"
        if self.partial_on_cancel:
            job.output = f"files/batch-{job.name.removeprefix('batches/')}"
        _json(h, 200, {})

    def finish(self, job: Job) -> None:
        """End ``job`` as its scenario says (FAILED, EXPIRED or SUCCEEDED)."""
        number = int(job.name.removeprefix("batches/b"))
        if number in self.fail_jobs:
            job.state = "BATCH_STATE_FAILED"
        elif number in self.expire_jobs:
            job.state = "BATCH_STATE_EXPIRED"
        else:
            job.state = "BATCH_STATE_SUCCEEDED"
            job.output = f"files/batch-b{number}"

    def _results(self, job: Job) -> bytes:
        lines = []
        pairs = list(zip(job.keys, job.requests, strict=True))
        if job.state == "BATCH_STATE_CANCELLED":
            pairs = pairs[: self.partial_on_cancel]
        for key, request in pairs:
            attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            if attempt <= self.missing_keys.get(key, 0):
                continue
            if attempt <= self.malformed_keys.get(key, 0):
                lines.append('{"key": "' + key + '", "response": {"candidates": [')
            elif attempt <= self.error_keys.get(key, 0):
                error = {"code": 500, "message": "internal error", "status": "INTERNAL"}
                lines.append(json.dumps({"key": key, "error": error}))
            else:
                row = {"key": key, "response": _response(self.answer(key, request))}
                if self.extra_fields:
                    row["response"] |= {"modelVersion": job.model, "responseId": f"r-{key}"}
                    row["response"]["usageMetadata"]["thoughtsTokenCount"] = 7
                    row["metadata"] = {"attempt": attempt}
                lines.append(json.dumps(row, ensure_ascii=False))
        return "\n".join(reversed(lines)).encode() + b"\n"

    def _operation(self, job: Job) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "name": job.name,
            "model": job.model,
            "displayName": job.display_name,
            "state": job.state,
            "batchStats": {"requestCount": str(len(job.keys))},
        }
        if job.output:
            metadata["output"] = {"responsesFile": job.output}
        operation = {"name": job.name, "metadata": metadata, "done": job.state not in _ACTIVE}
        number = int(job.name.removeprefix("batches/b"))
        if job.state == "BATCH_STATE_FAILED":
            operation["error"] = {"code": 3, "message": self.fail_jobs[number]}
        return operation


def _status(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def _response(text: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": len(text.split())},
    }


def _reply(h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
    h.send_response(status)
    for name, value in headers.items():
        h.send_header(name, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _json(h: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    _reply(h, status, json.dumps(payload).encode(), {"Content-Type": "application/json"})
