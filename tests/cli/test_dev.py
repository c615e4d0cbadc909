"""``airflow-iqp dev``: its settings are Airflow's, and it starts, watches and stops its
processes (run against a stand-in ``airflow`` that serves the health endpoint)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_iqp.cli.dev import COMPONENTS, HEALTH_KEYS, free_port, port_taken, stack_env, stack_settings
from airflow_iqp.cli.main import main
from airflow_iqp.cli.supervisor import alive, wait_gone

#: A stand-in for the ``airflow`` executable: ``db migrate`` succeeds; every component
#: records its pid and starts a child in its group, as the LocalExecutor's workers are; the
#: api-server answers the health endpoint; a component named in FAKE_EXIT fails at once.
FAKE_AIRFLOW = """\
import http.server, json, os, subprocess, sys, time
cmd = " ".join(sys.argv[1:])
if cmd == "db migrate":
    sys.exit(0)
if os.environ.get("FAKE_EXIT") == cmd:
    print(f"{cmd}: boom", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(os.environ["AIRFLOW_HOME"], "pids"), "a") as out:
    out.write(f"{os.getpid()} {child.pid}\\n")
if cmd == "api-server":
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({k: {"status": "healthy"} for k in HEALTH_KEYS}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
    http.server.HTTPServer(("127.0.0.1", int(os.environ["AIRFLOW__API__PORT"])), Health).serve_forever()
time.sleep(600)
"""


def test_every_setting_of_the_stack_is_an_option_airflow_knows(tmp_path):
    from airflow.configuration import conf

    settings = stack_settings(tmp_path / "home", tmp_path / "dags", 8123)
    unknown = [key for key in settings
               if key.lower().split("__", 1)[1] not in
               conf.configuration_description.get(key.lower().split("__", 1)[0], {}).get("options", {})]
    assert unknown == []
    env = stack_env(tmp_path / "home", settings, {"AIRFLOW__IQP__STATE_DIR": "/s", "PATH": "/bin"})
    assert env["AIRFLOW_HOME"] == str(tmp_path / "home") and env["AIRFLOW__IQP__STATE_DIR"] == "/s"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path / "dags") and env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert stack_settings(tmp_path, tmp_path, 1, paused=True)["CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "True"


def test_airflow_s_engine_on_the_stack_s_sqlite_waits_30_s_for_a_lock(tmp_path):
    """Airflow, started with the stack's settings, opens its SQLite metadata DB with a 30 s
    busy timeout (Python's default is 5 s): a component of a busy machine waits for another's
    write rather than exiting with "database is locked"."""
    env = stack_env(tmp_path / "home", stack_settings(tmp_path / "home", tmp_path / "dags", free_port()),
                    {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")})
    (tmp_path / "home").mkdir()
    probe = ("from airflow import settings; settings.configure_orm()\n"
             "with settings.engine.connect() as c: print(c.exec_driver_sql('PRAGMA busy_timeout').scalar())")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "30000"


def test_a_missing_dag_folder_or_a_port_in_use_is_named(tmp_path, capsys):
    assert main(["dev", "--dags", str(tmp_path / "none"), "--home", str(tmp_path / "home")]) == 2
    assert "--dags: " in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dev", "--dags", str(tmp_path), "--home", str(tmp_path / "home"), "--port", str(port)]) == 2
    assert f"--port: port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def start_dev(tmp_path: Path, port: int, **env: str) -> subprocess.Popen:
    fake = tmp_path / "airflow"
    fake.write_text(f"#!{sys.executable}\nHEALTH_KEYS = {HEALTH_KEYS!r}\n{FAKE_AIRFLOW}")
    fake.chmod(0o755)
    (tmp_path / "dags").mkdir()
    code = textwrap.dedent(f"""
        import sys
        from airflow_iqp.cli import dev
        from airflow_iqp.cli.main import main
        dev.airflow_bin = lambda: {str(fake)!r}
        sys.exit(main(["dev", "--dags", {str(tmp_path / "dags")!r}, "--home", {str(tmp_path / "home")!r},
                       "--port", "{port}", "--timeout", "60"]))
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


#: Seconds for the dev stack to start and stop: the supervisor kills what has not stopped 20 s
#: after Ctrl-C, and the rest is process start-up and exit on a loaded machine (the suite's
#: other lane runs beside these tests).
TIMEOUT = 180


def recorded_pids(home: Path) -> list[int]:
    return [int(p) for line in (home / "pids").read_text().splitlines() for p in line.split()]


def all_recorded_pids(home: Path, timeout: float = TIMEOUT) -> list[int]:
    """Every component's pid and its child's, once all have been written: the stand-in
    api-server answers healthy without waiting for the other components, which on a loaded
    machine may still be starting when the stack says it is up."""
    deadline = time.monotonic() + timeout
    while len(pids := recorded_pids(home)) < 2 * len(COMPONENTS) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def test_ctrl_c_stops_every_component_and_its_children(tmp_path):
    port = free_port()
    proc = start_dev(tmp_path, port)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Airflow is up"):
            break
    assert lines[-1].strip() == f"Airflow is up: http://127.0.0.1:{port} (Ctrl-C stops it)", "".join(lines)
    assert f"results and state in {tmp_path / 'home' / 'iqp' / 'state'}\n" in lines
    pids = all_recorded_pids(tmp_path / "home")
    assert len(pids) == 2 * len(COMPONENTS) and all(alive(p) for p in pids)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert "stopping Airflow" in out
    wait_gone(pids, 10)
    assert [p for p in pids if alive(p)] == []
    assert (tmp_path / "home" / "logs" / "db-migrate.log").exists()


def test_a_component_that_exits_stops_the_rest_and_shows_its_log(tmp_path):
    proc = start_dev(tmp_path, free_port(), FAKE_EXIT="scheduler")
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 1 and "Airflow's scheduler exited" in err and "scheduler: boom" in err, (out, err)
    pids = recorded_pids(tmp_path / "home")
    wait_gone(pids, 10)
    assert [p for p in pids if alive(p)] == []


def test_a_port_is_taken_while_listened_on_not_while_its_closed_connections_linger():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    assert port_taken(port)
    # The server closes first, as an api-server stopping under its clients does: its side of
    # the connection lingers in TIME_WAIT after the listener is gone.
    conn.close()
    time.sleep(0.1)
    client.close()
    srv.close()
    assert not port_taken(port)


@pytest.mark.parametrize("module", ["airflow_iqp.cli.dev", "airflow_iqp.cli.main"])
def test_the_command_needs_nothing_of_the_dev_harness(module):
    code = f"import sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith(('iqp_dev', 'tests')))))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True,
                         cwd="/").stdout
    assert json.loads(out) == []
