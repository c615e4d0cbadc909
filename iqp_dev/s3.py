"""A throw-away S3-compatible server for the tests and harnesses: moto's server, from PyPI,
run as a process of its own on a loopback port.

moto's own ``moto_server`` serves each request on a thread of its own, and its check of a
create-only write (``If-None-Match: *``) and the write are two steps: two racing creates of
one name could both succeed, which S3 itself never lets happen. This runs the same server
application on one thread, so each request is whole before the next begins and a create
wins once, as on S3. (On one thread, werkzeug speaks HTTP/1.0 and closes each connection:
no client holds the server.)

    python -m iqp_dev.s3 --port 5000        the server, until killed
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

#: What every client of the server is given: moto takes any credentials.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "iqp-test", "AWS_SECRET_ACCESS_KEY": "iqp-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen
    log: Path
    buckets: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The variables a process needs to reach the server (boto3, s3fs and the provider's store)."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (once); its ``s3://`` URL."""
        if name not in self.buckets:
            import boto3

            boto3.client("s3", endpoint_url=self.endpoint, **_client_kwargs()).create_bucket(Bucket=name)
            self.buckets.append(name)
        return f"s3://{name}"


def _client_kwargs() -> dict[str, str]:
    return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]}


@contextlib.contextmanager
def s3_server(base: str | os.PathLike, port: int | None = None, *, set_env: bool = True,
              timeout: float = 60.0) -> Iterator[S3Server]:
    """Run the server (its log in ``base``) until the context ends. ``set_env``: put its
    variables into this process's environment meanwhile, for the store and any child."""
    from iqp_dev.local_airflow import free_port

    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = base / "s3-server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "iqp_dev.s3", "--port", str(port)], stdout=fh,
                                stderr=subprocess.STDOUT, cwd=str(Path(__file__).resolve().parents[1]),
                                start_new_session=True)
    server = S3Server(port, proc, log)
    saved = {k: os.environ.get(k) for k in server.env}
    try:
        until = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the S3 server exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{server.endpoint}/", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > until:
                    raise RuntimeError(f"the S3 server did not answer in {timeout:.0f} s: {log}") from None
                time.sleep(0.2)
        if set_env:
            os.environ.update(server.env)
        yield server
    finally:
        if set_env:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
