"""The dev harness's API client against a real HTTP server that answers 503 first."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from iqp_dev.airflow_api import AirflowClient, ApiError


def serve(answers: list[int]):
    """A server that answers each request with the next status of ``answers`` (then 200)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            status = answers.pop(0) if answers else 200
            body = json.dumps({"ok": status == 200}).encode()
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
