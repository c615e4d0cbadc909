"""Helpers of the unit tests: a minimal Airflow context, and a stand-in for spark-submit that
records how it was started and writes what the job would."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pendulum

START = pendulum.datetime(2027, 1, 15, 8, tz="UTC")


class TI:
    """The few things of a task instance the operators use."""

    def __init__(self, task_id: str = "task", map_index: int = -1, try_number: int = 1):
        self.task_id, self.map_index, self.try_number = task_id, map_index, try_number
        self.start_date = pendulum.now("UTC")
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value


def context(ti: TI | None = None, start=START, end=None, **more) -> dict:
    """A task's context: the run's window, its task instance, the outlet events."""
    return {"ti": ti or TI(), "data_interval_start": start, "data_interval_end": end or start.add(minutes=4),
            "outlet_events": defaultdict(SimpleNamespace), **more}


FAKE = '''\
#!{python}
"""Stands in for spark-submit: records how it was started, and writes what the job would."""
import json, os, sys, time
from pathlib import Path

argv = sys.argv[1:]
Path({record!r}).write_text(json.dumps({{"argv": argv, "env": dict(os.environ), "pid": os.getpid()}}))
app = next(i for i, a in enumerate(argv) if a.endswith("_job.py"))
job, args = Path(argv[app]).name, argv[app + 1:]


def value(flag):
    return args[args.index(flag) + 1] if flag in args else None


time.sleep({sleep})
if job == "batch_job.py" and (value("--work") or value("--work-file")):
    work = json.loads(value("--work")) if value("--work") else json.loads(Path(value("--work-file")).read_text())
    Path(work["partial"]).mkdir(parents=True, exist_ok=True)
    Path(work["metrics"]).write_text(json.dumps({{
        "query": work["query"], "batch": work["batch"], "units": len(work["units"]), "wall_seconds": 2.0,
        "cpu_seconds": 1.0, "backend": value("--backend"), "written_at": time.time()}}))
elif job == "final_job.py" and value("--store"):
    from airflow_iqp.store import open_store

    ws = open_store(value("--store")).window(value("--query"), value("--window"))
    old = ws.manifest() or {{}}
    revision = old.get("revision", 0) + 1
    ws.write_manifest({{
        "result": ws.result_uri, "written_at": time.time(), "rows_out": 3,
        "wall_seconds": 3.0, "cpu_seconds": 1.5, "backend": value("--backend"), "quarantined": [],
        "revision": revision, "revisions": [{{"revision": r}} for r in range(1, revision + 1)]}})
sys.exit({exit_code})
'''


def fake_submit(tmp_path: Path, sleep: float = 0.0, exit_code: int = 0) -> tuple[str, Path]:
    """(path of a stand-in spark-submit in ``tmp_path``, path of the record it writes when run)."""
    record = tmp_path / "submit.json"
    path = tmp_path / "bin" / "spark-submit"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(FAKE.format(python=sys.executable, record=str(record), sleep=sleep,
                                                exit_code=exit_code)))
    path.chmod(0o755)
    return str(path), record


def read_record(record: Path) -> dict:
    return json.loads(record.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie that its parent has not reaped yet is dead too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def rewrite_claim(ws, batch: int, **fields) -> dict:
    """Batch ``batch``'s claim in window ``ws`` with ``fields`` changed (``claimed_at``, ...), as
    if it had been claimed so: written through the store's primitive, at the claim's key."""
    from airflow_iqp.store import batch_name

    claim = {**(ws.claim_of(batch) or {"batch": batch, "units": [], "files": []}), **fields}
    ws.store.put(f"{ws.query_id}/{ws.window_id}/claims/{batch_name(batch)}.json", claim)
    return claim


def land(landing, *names):
    """TPC-H-layout units (a directory of orders and lineitem files each) in ``landing``."""
    for name in names:
        d = landing / name
        d.mkdir(parents=True)
        for f in ("orders.parquet", "lineitem.parquet"):
            (d / f).write_bytes(b"x")
