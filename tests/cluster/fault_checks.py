"""The fault suite's verdicts: one :class:`Verdict` per fault, from a :class:`~tests.cluster.fault_scenario.Run`.

Every verdict checks the window of the DAG the fault struck: its result equals DuckDB's over
the files that landed in time (bad units left out), no unit was lost (every unit that landed
in time is in the result manifest, quarantined, or recorded late), none was counted twice
(each unit in one claim and once in the manifest), and the report and alerts say what
happened. ``row`` is the fault's line of ``benchmarks/results/faults.json``; ``problems`` is
empty when the fault was handled as it should be (the test asserts that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.fault_scenario import SQL, Run

NAMES = {
    1: "spark-submit driver JVM SIGKILLed mid-batch",
    2: "a batch's Airflow task process killed",
    3: "triggerer killed and restarted, sensors deferred",
    4: "scheduler killed and restarted mid-window",
    5: "Spark worker killed mid-batch and restarted",
    6: "Spark Connect server killed mid-window and restarted",
    7: "a corrupt, a wrong-schema and a half-written file",
    8: "the same unit published twice",
    9: "a unit landing after the last claim",
    10: "an empty window",
    11: "an infeasible deadline",
    12: "a batch failing every retry, then a cleared rerun",
}
#: Where each fault struck.
DAG_OF = {1: "f_submit", 2: "f_conn", 3: "f_conn", 4: "f_conn", 5: "f_submit", 6: "f_conn2", 7: "f_data",
          8: "f_data", 9: "f_data", 10: "f_empty", 11: "f_tight", 12: "f_fail"}
BAD = ("corrupt", "schema", "half")


@dataclass
class Verdict:
    fault: int
    row: dict
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok


def left_temporaries(ws) -> list[str]:
    """Temporary partials that the window's killed attempts left. A local store's writer
    renames its temporary into place and the next attempt removes a killed one's; an object
    store's writer writes a directory of its own that the key then names, and a killed
    attempt's stays, named by nothing: there, a temporary is a named partial that is not
    whole (no ``_SUCCESS``)."""
    import fsspec

    from airflow_iqp.store import LocalStore
    from airflow_iqp.store.objects import fs_and_path

    parent = ws.partial_uri(0).rsplit("/", 1)[0]
    if isinstance(ws.store, LocalStore):
        return [str(p) for p in Path(parent).glob(".batch-*")]
    named = list(ws.written_partials().values())
    fs = fs_and_path(named[0])[0] if named else fsspec.filesystem("file")
    return [uri for uri in named if not fs.exists(fs_and_path(uri)[1] + "/_SUCCESS")]


def duckdb_rows(files: list[str]) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    if files:
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet({files!r})")
    else:
        con.execute("CREATE VIEW events AS SELECT * FROM (SELECT NULL::VARCHAR AS country, NULL::DOUBLE AS amount, "
                    "NULL::BIGINT AS user_id) WHERE false")
    rows = [tuple(r) for r in con.execute(SQL).fetchall()]
    con.close()
    return rows


def window_facts(run: Run, dag: str) -> dict:
    """What the window's state says, against what landed in it."""
    ws = run.window(dag)
    claims = ws.claims()
    claimed = [u for _b, c in sorted(claims.items()) for u in c.get("units", [])]
    manifest = ws.manifest() or {}
    report = ws.doc("report") or {}
    landed = run.published.get(dag, [])
    in_time = sorted({p["name"] for p in landed if p["kind"] in ("good", "bad", *BAD)})
    good = sorted({p["name"] for p in landed if p["kind"] in ("good", "bad")})   # f_fail's bad file is replaced
    late = sorted({p["name"] for p in landed if p["kind"] == "late"})
    quarantined = sorted(q["unit"] for q in manifest.get("quarantined", []))
    units = list(manifest.get("units", []))
    lost = sorted(set(in_time) - set(units) - set(quarantined)) + sorted(set(late) - set(report.get("late_units", [])))
    twice = (len(claimed) - len(set(claimed))) + (len(units) - len(set(units)))
    facts = {"ws": ws, "claims": claims, "claimed": claimed, "manifest": manifest, "report": report, "good": good,
             "late": late, "quarantined": quarantined, "lost": lost, "twice": twice, "result_error": None}
    try:
        from tests.support.reference import assert_same_rows, read_parquet_dir

        got = [tuple(r.values()) for r in read_parquet_dir(manifest["result"]).to_pylist()]
        want = duckdb_rows([str(run.landing(dag) / n) for n in good])
        assert_same_rows(got, want, ordered=True, label=dag)
    except Exception as exc:  # noqa: BLE001 - a verdict, not a crash: the row says it
        facts["result_error"] = f"{type(exc).__name__}: {exc}"[:400]
    return facts


def _ti(run: Run, dag: str, task_id: str, map_index: int = -1) -> dict:
    return next((t for t in run.tis.get(dag, []) if t["task_id"] == task_id and t["map_index"] == map_index), {})


def _ts(value: str | None) -> float | None:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp() if value else None


def verdict(run: Run, n: int) -> Verdict:
    """The verdict on fault ``n``: the common checks, then the fault's own (``_fault_<n>``)."""
    dag = DAG_OF[n]
    f = window_facts(run, dag)
    fault = run.faults.get(n, {})
    v = Verdict(n, {"fault": f"{n}. {NAMES[n]}", "detected_by": None, "recovery_seconds": None,
                    "result_correct": f["result_error"] is None, "units_lost": len(f["lost"]),
                    "units_double_counted": f["twice"], "deadline_met": f["report"].get("deadline_met")})
    for err in run.errors:
        if err.startswith(f"fault {n}:"):
            v.problems.append(f"not injected: {err}")
    state = (run.final.get(dag) or {}).get("state")
    v.check(state == "success", f"{dag}'s run ended {state}\n{run.logs.get(dag, '')[-6000:]}")
    v.check(f["result_error"] is None, f"result differs from DuckDB: {f['result_error']}")
    v.check(not f["lost"], f"units lost: {f['lost']}")
    v.check(f["twice"] == 0, f"units counted twice: {f['twice']} ({f['claimed']})")
    v.check(not left_temporaries(f["ws"]), "a killed attempt's temporary partial was left")
    if n not in (11, 12) and run.on_time:  # the deadline was met: no alert
        v.check(run.alert(dag) is None and f["ws"].doc("deadline_risk") is None,
                "a deadline alert or risk warning fired")
    globals()[f"_fault_{n}"](run, v, f, fault)
    if v.row["recovery_seconds"] is not None:
        v.row["recovery_seconds"] = round(v.row["recovery_seconds"], 1)
    return v


def _retried_batch(run, v, f, fault, dag, index, how, retried: bool = True) -> None:
    """A batch struck while it ran: its partial written after the fault, from its first claim;
    with ``retried``, by another attempt, which the task instance and the report both show."""
    ws = f["ws"]
    metrics = ws.metrics(index)
    ti = _ti(run, dag, "batch.submit", index - 1)
    v.check(ws.claim_of(index) is not None and ws.claim_of(index) == fault.get("claim"),
            f"batch {index}'s claim changed after the fault")
    v.check(metrics.get("unit_ids") == (f["claims"].get(index) or {}).get("units"),
            f"batch {index}'s partial is not of its claim")
    written = metrics.get("written_at")
    v.check(bool(written) and written > fault.get("at", 0), f"batch {index}'s partial was not written after the fault")
    row = next((b for b in f["report"].get("batches", []) if b["index"] == index), {})
    v.row["detected_by"] = how.format(try_number=ti.get("try_number"), attempts=row.get("attempts"))
    v.row["recovery_seconds"] = (written - fault["at"]) if written and fault.get("at") else None
    if retried:
        v.check(ti.get("try_number", 0) >= 2, f"batch {index} was not retried: {ti}")
        v.check(row.get("attempts", 0) >= 2 and f"batch-{index:04d}" in f["report"].get("retried", []),
                f"the report does not say batch {index} ran more than once: {row}")


def _fault_1(run, v, f, fault):
    _retried_batch(run, v, f, fault, "f_submit", 1, "spark-submit exited (its JVM SIGKILLed): the task failed and "
                   "Airflow retried it from the same claim (try {try_number}; the report: {attempts} attempts)")
    v.check(bool(fault.get("jvm")), "no driver JVM was found to kill")


def _fault_2(run, v, f, fault):
    _retried_batch(run, v, f, fault, "f_conn", 1, "the task supervisor saw its task process die (SIGKILL): the task "
                   "failed and Airflow retried it from the same claim (try {try_number}; {attempts} attempts)")


def _fault_3(run, v, f, fault):
    v.row["detected_by"] = ("the triggerer's job stopped heartbeating; the restarted triggerer took over the "
                            "deferred sensors' triggers, which then fired and claimed")
    done = fault.get("recovered_at")
    v.check(bool(done), "the restarted triggerer never held every trigger")
    v.row["recovery_seconds"] = (done - fault["at"]) if done else None
    plan = f["ws"].doc("plan") or {}
    v.check(sorted(f["claims"]) == sorted(b["index"] for b in plan.get("batches", [])),
            f"not every batch claimed: {sorted(f['claims'])}")


def _fault_4(run, v, f, fault):
    v.row["detected_by"] = ("the scheduler's job stopped heartbeating; the restarted scheduler queued the window's "
                            "remaining tasks (a trigger that fired meanwhile had set its task to scheduled)")
    starts = [s for t in run.tis.get("f_conn", []) if (s := _ts(t.get("start_date"))) and s > fault.get("at", 0)]
    v.check(bool(starts), "no task started after the scheduler came back")
    v.row["recovery_seconds"] = (min(starts) - fault["at"]) if starts else None


def _fault_5(run, v, f, fault):
    _retried_batch(run, v, f, fault, "f_submit", 2, "Spark: the master lost the worker and the driver its executor; "
                   "the restarted worker gave it a new one and the batch finished (task try {try_number})",
                   retried=False)


def _fault_6(run, v, f, fault):
    ti = _ti(run, "f_conn2", "batch.submit", 0)
    how = ("the task's Connect session failed while the server was down: the task failed and was retried on "
           "the restarted server from the same claim (try {try_number}; {attempts} attempts)"
           if ti.get("try_number", 1) > 1 else
           "the Connect client's own retries rode out the restart: the batch ran on the restarted server")
    _retried_batch(run, v, f, fault, "f_conn2", 1, how, retried=ti.get("try_number", 1) > 1)


def _fault_7(run, v, f, fault):
    q = {x["unit"]: x["reason"] for x in f["manifest"].get("quarantined", [])}
    want = sorted(p["name"] for p in run.published["f_data"] if p["kind"] in BAD)
    v.check(sorted(q) == want, f"quarantined {sorted(q)}, expected {want}")
    v.check(sorted(r["unit"] for r in f["report"].get("quarantined", [])) == want, "the report does not name them")
    v.check(f["report"].get("partial") is True and f["manifest"].get("partial") is True, "result not marked partial")
    v.check(not any(".inprogress" in u for u in f["claimed"] + f["report"].get("late_units", [])),
            "the file still being written was claimed or called late")
    v.row["detected_by"] = "the batch's file inspection (pyarrow): quarantined, named in the report, result partial"
    v.row["recovery_seconds"] = 0.0


def _fault_8(run, v, f, fault):
    again = [p["name"] for p in run.published["f_data"] if p["kind"] == "again"]
    v.check(bool(again), "no unit was published twice")
    for name in again:
        v.check(f["claimed"].count(name) == 1, f"{name} claimed {f['claimed'].count(name)} times")
        v.check(name not in f["report"].get("late_units", []), f"{name}, published again, was called late")
    v.row["detected_by"] = "the claims: a unit already claimed is not claimed again"
    v.row["recovery_seconds"] = 0.0


def _fault_9(run, v, f, fault):
    late = f["late"]
    v.check(bool(late), "no unit landed late")
    v.check(f["report"].get("late_units") == late, f"the report's late units {f['report'].get('late_units')}")
    v.check((f["ws"].doc("late") or {}).get("units") == late, "late.json does not list them")
    v.check(not set(late) & set(f["claimed"]), "a late unit was claimed")
    v.check(f["manifest"].get("partial") is True, "the result is not marked partial")
    v.row["detected_by"] = "the final task: units no batch claimed are recorded in late.json; result partial"
    v.row["recovery_seconds"] = 0.0


def _fault_10(run, v, f, fault):
    v.check(f["claimed"] == [] and f["manifest"].get("units") == [], f"claims in an empty window: {f['claimed']}")
    v.check(f["manifest"].get("rows_out") in (0, None) and f["report"].get("partial") is False,
            f"empty window's result: {f['manifest'].get('rows_out')} rows, partial {f['report'].get('partial')}")
    if run.on_time:
        v.check(f["report"].get("deadline_met") is True, "the empty window missed its deadline")
    v.row["detected_by"] = "every batch found nothing to claim and skipped; the final task wrote an empty result"
    v.row["recovery_seconds"] = 0.0


def _fault_11(run, v, f, fault):
    risk = f["ws"].doc("deadline_risk")
    plan = f["ws"].doc("plan") or {}
    v.check(bool(risk) and bool(risk.get("reason")), "the risk notifier did not fire (no deadline_risk.json)")
    v.check(plan.get("plan", {}).get("feasible") is False, "the plan was feasible")
    v.check(run.alert("f_tight") is not None, "the Deadline Alert did not fire")
    v.check(f["report"].get("deadline_met") is False, "the report says the deadline was met")
    v.row["detected_by"] = ("the plan (DeadlineRiskNotifier: deadline_risk.json), then the DeadlineAlert at the "
                            "deadline (deadline_missed record); the earliest plan ran to the end")


def _fault_12(run, v, f, fault):
    failed = fault.get("failed_run") or {}
    v.check(failed.get("state") == "failed", f"the run did not fail: {failed.get('state')}")
    failed_ti = next((t for t in fault.get("failed_tis") or [] if t["task_id"] == "batch.submit"
                      and t["state"] == "failed"), None)
    v.check(bool(failed_ti) and failed_ti["try_number"] >= 2, f"no batch failed after a retry: {failed_ti}")
    v.check(fault.get("alert_seen") is True and run.alert("f_fail") is not None, "the Deadline Alert did not fire")
    claims = fault.get("claims") or {}
    for i in (1, 2):
        v.check(claims.get(i) is not None and f["ws"].claim_of(i) == claims.get(i),
                f"batch {i}'s claim changed in the rerun")
    before = (fault.get("metrics_before") or {}).get(1) or {}
    after = f["ws"].metrics(1)
    v.check(bool(before) and before.get("written_at") == after.get("written_at"),
            "batch 1's written partial was not reused")
    v.check(_ti(run, "f_fail", "batch.submit", 0).get("try_number") == 1, "batch 1 ran again")
    v.row["detected_by"] = ("the batch's DataError (wrong schema, on_bad_unit='fail') on every try; the run failed; "
                            "the DeadlineAlert fired; cleared after the fix, the rerun reused claims and partials")
    done, cleared = fault.get("rerun_done_at"), fault.get("cleared_at")
    v.row["recovery_seconds"] = (done - cleared) if done and cleared else None
