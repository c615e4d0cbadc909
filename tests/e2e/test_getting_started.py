"""docs/getting-started.md, followed word for word, as a user in a fresh terminal would.

The page's runnable blocks are the ``bash`` blocks under a ``<!-- step -->`` comment; they
run in order, each in bash with the environment and working directory the block before
left (one terminal, as the page says; its second terminal runs the first block again).
``<!-- step: in the background -->`` leaves its processes running until the end, and
``<!-- step: until Ctrl-C, ready at "LINE" -->`` runs in the foreground until the test
sends it SIGINT, the page's Ctrl-C; the next block runs once it has printed LINE. The only
things set from outside are the page's own ``IQP_DIR`` (a temporary directory) and
``IQP_PORT`` (a free port).

Then every window that has a report must hold the page's query over exactly the CSV files
that arrived in it (their last-modified times), equal to DuckDB over the same files, rows
and types. Where a step fails, the page is what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_iqp.cli.dev import free_port, port_taken
from tests.support.reference import assert_same_rows

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
STEP = re.compile(r"<!-- step(?::\s*(?P<kind>[^>]*?))?\s*-->\n```bash\n(?P<body>.*?)\n```", re.S)
SERVER = re.compile(r'until Ctrl-C, ready at "(?P<ready>[^"]+)"')
BACKGROUND = "in the background"
#: Seconds a block may take: the longest waits for the first window's result.
STEP_TIMEOUT = 600
#: Seconds a server block may take to print its ready line.
READY_TIMEOUT = 420


@dataclass
class Step:
    kind: str
    body: str


def page_steps() -> list[Step]:
    steps = [Step(m["kind"] or "", m["body"]) for m in STEP.finditer(PAGE.read_text())]
    unknown = [s.kind for s in steps if s.kind and s.kind != BACKGROUND and not SERVER.fullmatch(s.kind)]
    assert steps and unknown == [], f"steps of unknown kinds in {PAGE.name}: {unknown}"
    return steps


class Terminal:
    """One shell session: each block runs in a bash of its own process group, which starts
    where the block before left off (its exported variables and its directory)."""

    def __init__(self, work: Path, env: dict[str, str], cwd: Path) -> None:
        self.work, self.env, self.cwd = work, env, cwd
        self.groups: list[int] = []
        self.count = 0

    def start(self, body: str) -> tuple[subprocess.Popen, Path]:
        self.count += 1
        script, log = self.work / f"step-{self.count}.sh", self.work / f"step-{self.count}.log"
        script.write_text(body + "\n")
        state = self.work / "state"
        wrapper = (f"set -eo pipefail\nsource {script}\npwd > {state}.cwd\n"
                   f"env -0 > {state}.env\n")
        with open(log, "wb") as out:
            proc = subprocess.Popen(["bash", "-c", wrapper], env=self.env, cwd=self.cwd, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.groups.append(proc.pid)
        return proc, log

    def run(self, body: str) -> str:
        proc, log = self.start(body)
        try:
            proc.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"step {self.count} still running after {STEP_TIMEOUT} s:\n{body}") from None
        output = log.read_text(errors="replace")
        assert proc.returncode == 0, f"step {self.count} failed ({proc.returncode}):\n{body}\n---\n{output}"
        self.load()
        return output

    def load(self) -> None:
        state = self.work / "state"
        self.cwd = Path((state.with_suffix(".cwd")).read_text().strip())
        pairs = (item.split("=", 1) for item in state.with_suffix(".env").read_bytes().decode().split("\0") if item)
        self.env = {k: v for k, v in pairs if not k.startswith("BASH_FUNC_")}

    def kill_all(self) -> None:
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def fresh_env(iqp_dir: Path, port: int) -> dict[str, str]:
    """A new terminal's environment: no Airflow settings, this checkout's virtualenv not active."""
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "IQP_", "PYSPARK", "SPARK_")) and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return {**env, "IQP_DIR": str(iqp_dir), "IQP_PORT": str(port)}


def wait_ready(proc: subprocess.Popen, log: Path, line: str) -> None:
    end = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < end:
        text = log.read_text(errors="replace")
        if line in text:
            return
        assert proc.poll() is None, f"the server step exited ({proc.returncode}) before printing {line!r}:\n{text}"
        time.sleep(1)
    raise AssertionError(f"no {line!r} after {READY_TIMEOUT} s:\n{log.read_text(errors='replace')}")


def stop(proc: subprocess.Popen, log: Path) -> str:
    """The page's Ctrl-C: SIGINT to the foreground group; it must end cleanly."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running 90 s after Ctrl-C:\n{log.read_text(errors='replace')}") from None
    output = log.read_text(errors="replace")
    assert proc.returncode == 0, f"exited {proc.returncode} after Ctrl-C:\n{output}"
    return output


def diagnostics(home: Path, server_log: Path | None) -> str:
    parts = [f"--- {server_log.name} ---\n" + server_log.read_text(errors="replace")[-4000:]] if server_log else []
    for path in sorted(home.glob("logs/*.log")):
        parts.append(f"--- {path.name} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-30:]))
    for path in sorted(home.glob("logs/dag_id=*/**/attempt=*.log")):
        text = path.read_text(errors="replace")
        if "ERROR" in text or "Traceback" in text:
            parts.append(f"--- {path.relative_to(home)} ---\n" + text[-3000:])
    return "\n".join(parts)


def test_the_getting_started_page_word_for_word(tmp_path):
    t0 = time.monotonic()
    iqp_dir, port = tmp_path / "iqp", free_port()
    term = Terminal(tmp_path, fresh_env(iqp_dir, port), ROOT)
    server = server_log = None
    outputs = []
    ok = False
    try:
        for step in page_steps():
            if ready := SERVER.fullmatch(step.kind):
                server, server_log = term.start(step.body)
                wait_ready(server, server_log, ready["ready"])
                print(f"[getting-started] {ready['ready']} after {time.monotonic() - t0:.0f} s")
            else:
                outputs.append(term.run(step.body))
        print(f"[getting-started] the first result after {time.monotonic() - t0:.0f} s")
        assert server is not None, "the page starts no Airflow"
        windows = check_results(iqp_dir, outputs[-1])
        stopped = stop(server, server_log)
        assert "stopping Airflow" in stopped
        assert not port_taken(port), "the api-server outlived Ctrl-C"
        ok = True
        print(f"[getting-started] {len(windows)} window(s) {windows} equal DuckDB; "
              f"wall time {time.monotonic() - t0:.0f} s")
    finally:
        if not ok:
            print(diagnostics(iqp_dir / "airflow", server_log))
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        term.kill_all()


def check_results(iqp_dir: Path, printed: str) -> list[str]:
    """Each window with a report: its result is the DAG's query over exactly the files that
    arrived in it, as DuckDB computes it. Returns the windows checked."""
    import pyarrow.parquet as pq

    sql = re.search(r'sql="""(.*?)"""', (iqp_dir / "airflow" / "dags" / "clicks.py").read_text(), re.S)[1]
    state = iqp_dir / "airflow" / "iqp" / "state" / "clicks"
    windows = sorted(p.parent for p in state.glob("*/report.json"))
    assert windows, f"no window has a report under {state}"
    counts: dict[str, int] = {}
    for window in windows:
        plan = json.loads((window / "plan.json").read_text())
        start, end = plan["window_start"], plan["window_end"]
        assert end - start == 60
        arrived = sorted(p for p in (iqp_dir / "clicks").iterdir()
                         if p.suffix == ".csv" and not p.name.startswith((".", "_"))
                         and start <= p.stat().st_mtime < end)
        manifest = json.loads((window / "result.manifest.json").read_text())
        assert arrived, f"{window.name}: no file arrived in it, though the page starts the writer before Airflow"
        assert sorted(Path(f).name for f in manifest["files"]) == [p.name for p in arrived], window.name
        got = pq.read_table(window / "result")
        want = duckdb_over(arrived, sql)
        assert got.column_names == want.column_names, window.name
        assert [kind(t) for t in got.schema.types] == [kind(t) for t in want.schema.types], \
            f"{window.name}: {got.schema} vs DuckDB's {want.schema}"
        assert_same_rows([tuple(r.values()) for r in got.to_pylist()], [tuple(r.values()) for r in want.to_pylist()],
                         ordered=True, label=window.name)
        counts[window.name] = len(arrived)
        report = json.loads((window / "report.json").read_text())
        print(f"[getting-started] window {window.name}: {len(arrived)} files, {len(plan['batches'])} batches "
              f"planned ({plan['models']}), deadline {'met' if report['deadline_met'] else 'MISSED'}")
    # The page's reading of the results printed what it found then, the first window at least.
    shown = dict(re.findall(r"^window (\S+) \(UTC\): (\d+) files", printed, re.M))
    assert windows[0].name in shown and all(counts[w] == int(n) for w, n in shown.items()), printed
    return list(counts)


def duckdb_over(files: list[Path], sql: str):
    import duckdb

    import pyarrow as pa

    con = duckdb.connect()
    con.execute(f"CREATE VIEW clicks AS SELECT * FROM read_csv({[str(f) for f in files]!r}, header = true)")
    return pa.table(con.execute(sql).arrow())


def kind(arrow_type) -> str:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return "string"
    return str(arrow_type)
