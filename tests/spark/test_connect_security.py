"""A Spark Connect server with Spark Connect's own token, for real: started as the provider
starts it (one server, about 20 s), it refuses a client without the token or with a wrong
one, serves one with it, and the token shows neither in ``ps`` nor in its log; the provider's
hook connects with the token from an Airflow connection and logs none of it. What the
server writes into the state directory is not world-readable, from its Hadoop umask conf
alone (checked before the rename that would narrow it).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import subprocess
import sys

import psutil
import pytest

from iqp_dev.local_airflow import free_port
from airflow_iqp.paths import DENIED
from airflow_iqp.spark.connect import (
    CONNECT_MODE_VAR, TOKEN_ENV, connect_url, server_status, start_server, stop_server, without_connect_mode,
)
from airflow_iqp.spark.steps import write_atomic
from airflow_iqp.store import open_store

pytestmark = pytest.mark.spark

TOKEN = "iqp-" + secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("connect-token")
    port = free_port()
    old = os.umask(0o022)  # the server inherits a permissive umask: its conf alone must narrow what it writes
    try:
        info = start_server(port, base=base, driver_memory="1g", token=TOKEN)
    finally:
        os.umask(old)
    yield info
    assert stop_server(port, base=base)
    os.environ.pop(CONNECT_MODE_VAR, None)


def _client(url: str) -> subprocess.CompletedProcess:
    """A Spark Connect client in a child process (this one stays Connect-free), without the token in its environment."""
    code = ("from pyspark.sql import SparkSession; import sys; "
            "s = SparkSession.builder.remote(sys.argv[1]).create(); print('rows', s.range(5).count()); s.stop()")
    env = without_connect_mode()
    env.pop(TOKEN_ENV, None)
    return subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=180, env=env)


def test_only_a_client_with_the_token_is_served(server):
    port = server["port"]
    assert server["url"].startswith(f"sc://localhost:{port}/;token=")
    status = server_status(port, os.path.dirname(server["dir"]))
    assert status["authenticated"] and status["host"] == "127.0.0.1" and TOKEN not in json.dumps(status)
    for url in (f"sc://127.0.0.1:{port}", f"sc://localhost:{port}", connect_url(port, token="not-the-token-42")):
        refused = _client(url)
        assert refused.returncode != 0 and "rows 5" not in refused.stdout, url
    assert "UNAUTHENTICATED" in _client(f"sc://localhost:{port}").stderr
    served = _client(server["url"])
    assert served.returncode == 0 and "rows 5" in served.stdout, served.stderr[-2000:]


def test_the_token_shows_neither_in_ps_nor_in_the_server_log(server):
    proc = psutil.Process(server["pid"])
    assert proc.environ().get(TOKEN_ENV) == TOKEN  # how the JVM got it
    for p in (proc, *proc.children(recursive=True)):
        try:
            assert TOKEN not in " ".join(p.cmdline())
        except (psutil.ZombieProcess, psutil.NoSuchProcess):  # a Python worker that has just ended
            continue
    log = open(server["log"]).read()
    assert "spark.connect.grpc.binding.address=127.0.0.1" in log and TOKEN not in log
    on_disk = [p for p in os.scandir(server["dir"]) if p.is_file() and TOKEN in open(p.path).read()]
    assert on_disk == []


def test_the_hook_connects_with_the_connection_s_token_and_logs_none_of_it(server, tmp_path, monkeypatch, caplog,
                                                                            capfd):
    from airflow_iqp.hooks.spark import IQPSparkHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_TOKEN", json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server["port"], "password": TOKEN}))
    ws = open_store(tmp_path / "state").window("q", "w")
    raw: dict[str, int] = {}

    def modes_before_rename(tmp):
        raw.update({p: stat.S_IMODE(os.lstat(os.path.join(d, p)).st_mode)
                    for d, dirs, files in os.walk(tmp) for p in dirs + files})
        raw["."] = stat.S_IMODE(os.lstat(tmp).st_mode)

    with caplog.at_level(logging.DEBUG):
        with IQPSparkHook("spark_connect_token").session("security-test") as spark:
            assert spark.range(7).count() == 7
            write_atomic(spark.range(10), ws.partial_uri(0), before_rename=modes_before_rename)
    assert os.environ.get(CONNECT_MODE_VAR) is None
    assert raw and {p: oct(m) for p, m in raw.items() if m & DENIED} == {}  # Spark's own writes, before our chmod
    out, err = capfd.readouterr()
    logged = "\n".join([r.getMessage() for r in caplog.records] + [out, err])
    assert TOKEN not in logged
    assert [p for p in (tmp_path / "state").rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()] == []
