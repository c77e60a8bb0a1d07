"""A local stand-in for the Gemini Developer API's file and batch endpoints.

Serves the real ``google-genai`` client on 127.0.0.1 (stdlib ``ThreadingHTTPServer``):

- ``POST /upload/<version>/files`` starts a resumable upload (``X-Goog-Upload-Command:
  start``) and answers with ``X-Goog-Upload-URL``; chunks posted there carry
  ``X-Goog-Upload-Command: upload[, finalize]`` and ``X-Goog-Upload-Offset``; the
  final chunk gets ``X-Goog-Upload-Status: final`` and the File resource;
- ``POST /<version>/models/<model>:batchGenerateContent`` creates a job from an
  uploaded JSONL file, ``GET /<version>/batches/<id>`` reports it,
  ``POST /<version>/batches/<id>:cancel`` cancels it;
- ``GET /<version>/files/<id>:download`` returns a results file.

Any API version prefix is accepted. Each request line is answered by ``answer(key,
request)``; results are written in reverse order so callers must join on ``key``.
Scenario knobs make jobs fail, hold them running, or break chosen lines.
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


@dataclass
class Job:
    name: str
    model: str
    file: str
    keys: list[str]
    requests: list[dict[str, Any]]
    state: str = "BATCH_STATE_PENDING"
    polls: int = 0
    output: str | None = None


@dataclass
class FakeGemini:
    """The fake service's state, scenario knobs and a log of what the client did."""

    answer: Callable[[str, dict[str, Any]], str]
    fail_jobs: set[int] = field(default_factory=set)  # 1-based job numbers that end FAILED
    error_keys: dict[str, int] = field(
        default_factory=dict
    )  # key -> attempts answered with an error line
    malformed_keys: dict[str, int] = field(
        default_factory=dict
    )  # key -> attempts answered with garbage
    hold: bool = False  # jobs stay RUNNING while set
    polls_to_finish: int = 1  # RUNNING for this many polls first
    uploads: dict[str, bytes] = field(default_factory=dict)
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

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
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
            if method == "GET" and rest.startswith("batches/"):
                return self._get(h, rest)
            if method == "POST" and rest.startswith("batches/") and rest.endswith(":cancel"):
                return self._cancel(h, rest.removesuffix(":cancel"))
            if method == "GET" and rest.startswith("files/") and rest.endswith(":download"):
                return self._download(h, rest.removesuffix(":download"))
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
        _reply(h, 200, self._results(job), {"Content-Type": "application/octet-stream"})

    # ------------------------------------------------------------------ batches

    def _create(self, h: BaseHTTPRequestHandler, model: str, body: dict[str, Any]) -> None:
        file = body["batch"]["inputConfig"]["fileName"]
        rows = [json.loads(line) for line in self.uploads[file].decode().splitlines()]
        job = Job(
            f"batches/b{len(self.jobs) + 1}",
            model,
            file,
            [r["key"] for r in rows],
            [r["request"] for r in rows],
        )
        self.jobs.append(job)
        _json(h, 200, self._operation(job))

    def _get(self, h: BaseHTTPRequestHandler, name: str) -> None:
        job = next((j for j in self.jobs if j.name == name), None)
        if job is None:
            return _json(h, 404, {"error": {"code": 404, "message": f"no job {name}"}})
        if job.state in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING") and not self.hold:
            job.polls += 1
            job.state = "BATCH_STATE_RUNNING"
            if job.polls > self.polls_to_finish:
                self._finish(job)
        _json(h, 200, self._operation(job))

    def _cancel(self, h: BaseHTTPRequestHandler, name: str) -> None:
        job = next(j for j in self.jobs if j.name == name)
        job.state = "BATCH_STATE_CANCELLED"
        _json(h, 200, {})

    def _finish(self, job: Job) -> None:
        number = int(job.name.removeprefix("batches/b"))
        if number in self.fail_jobs:
            job.state = "BATCH_STATE_FAILED"
            return
        job.state = "BATCH_STATE_SUCCEEDED"
        job.output = f"files/batch-b{number}"

    def _results(self, job: Job) -> bytes:
        lines = []
        for key, request in zip(job.keys, job.requests, strict=True):
            attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            if attempt <= self.malformed_keys.get(key, 0):
                lines.append('{"key": "' + key + '", "response": {"candidates": [')
            elif attempt <= self.error_keys.get(key, 0):
                error = {"code": 500, "message": "internal error", "status": "INTERNAL"}
                lines.append(json.dumps({"key": key, "error": error}))
            else:
                lines.append(
                    json.dumps({"key": key, "response": _response(self.answer(key, request))})
                )
        return "\n".join(reversed(lines)).encode() + b"\n"

    def _operation(self, job: Job) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "name": job.name,
            "model": job.model,
            "state": job.state,
        }
        if job.output:
            metadata["output"] = {"responsesFile": job.output}
        done = job.state not in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING")
        return {"name": job.name, "metadata": metadata, "done": done}


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
