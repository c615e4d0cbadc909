"""The dev harness's API client against a real HTTP server: POSTs answered 503 first, a task log with its exception."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from iqp_dev.airflow_api import AirflowClient, ApiError


def serve(answers: list[int], get: dict | None = None):
    """A server that answers each POST with the next status of ``answers`` (then 200), and
    each GET with ``get``."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            status = answers.pop(0) if answers else 200
            self.answer(status, {"ok": status == 200})

        def do_GET(self):
            self.answer(200, get)

        def answer(self, status: int, doc) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_post_refused_with_503_is_sent_again_until_it_succeeds():
    server, seen = serve([503, 503])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "sqlite://")
        assert client.api("POST", "/api/v2/backfills", {"dag_id": "d"}) == {"ok": True}
        assert len(seen) == 3 and all(json.loads(s) == {"dag_id": "d"} for s in seen)
    finally:
        server.shutdown()


def test_other_errors_are_not_sent_again():
    server, seen = serve([409])
    try:
        client = AirflowClient(f"http://127.0.0.1:{server.server_port}", "sqlite://")
        with pytest.raises(ApiError) as err:
            client.api("POST", "/api/v2/backfills", {"dag_id": "d"})
        assert err.value.status == 409 and len(seen) == 1
    finally:
        server.shutdown()


def test_a_task_log_carries_the_exception_the_task_failed_with():
    """Airflow 3 keeps a failure's exception beside the event, in structlog's dict form: the
    text names its type, message and frames, so a harness that prints a failed task's log
    says why it failed."""
    import sys

    import structlog

    def fail():
        raise RuntimeError("[SPARK_JOB_CANCELLED] out of heap")

    try:
        fail()
    except RuntimeError:
        detail = structlog.tracebacks.ExceptionDictTransformer()(sys.exc_info())
    content = [{"event": "::group::Pre Execute"}, {"event": "Task failed with exception", "error_detail": detail}]

    server, _seen = serve([], get={"content": content})
    try:
        text = AirflowClient(f"http://127.0.0.1:{server.server_port}", "sqlite://").task_log("d", "r", "t")
    finally:
        server.shutdown()
    lines = text.splitlines()
    assert lines[:2] == ["::group::Pre Execute", "Task failed with exception"]
    assert lines[-1] == "RuntimeError: [SPARK_JOB_CANCELLED] out of heap"
    assert any(line.endswith(", in fail") for line in lines[2:-1])
