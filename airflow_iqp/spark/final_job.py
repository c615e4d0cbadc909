"""spark-submit application: the final aggregation of one window (:mod:`airflow_iqp.spark.merge`).

    spark-submit final_job.py --store LOCATION --query ID --window ID --backend NAME
                              [--expect-units N] [--no-history]
                              [--tail ENTRY_JSON [--tail-slots N]] [--late BATCH]

It merges every batch's partial into the window's result, its manifest written last
(:func:`~airflow_iqp.spark.merge.execute_final`). With ``--tail`` (a fused tail: the plan's
tail, the last batch's entry with the batches ready after the task starts) the application
starts before the window's end, runs those batches as each becomes ready, waits for the
last batch's input, claims it, and runs it with the merge (:func:`~airflow_iqp.spark.tail.run_tail`);
a group's tail (``--query`` the group, the entry naming its members) merges every member.
With ``--late BATCH`` (late data, merged) it merges the claimed late batch into the result
as a new revision (:func:`~airflow_iqp.spark.merge.execute_late`). No Airflow import here:
this file runs on a Spark driver.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="final_job.py", description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True, help="the state store's location")
    parser.add_argument("--query", required=True)
    parser.add_argument("--window", required=True)
    parser.add_argument("--backend", required=True, help="the backend's name, as the cost history records it")
    parser.add_argument("--expect-units", type=int)
    parser.add_argument("--no-history", action="store_true")
    parser.add_argument("--tail", help="a fused tail: the last batch's plan entry (JSON); wait for its input, "
                                       "claim it, run it, then merge (run_tail)")
    parser.add_argument("--tail-slots", type=int, default=0, help="fused tails that run at once (0: no limit)")
    parser.add_argument("--late", type=int, metavar="BATCH",
                        help="late data: merge this claimed late batch into the result, a new revision (execute_late)")
    args = parser.parse_args(argv)

    from airflow_iqp.spark.entry import run_job
    from airflow_iqp.store import open_store

    ws = open_store(args.store).window(args.query, args.window)
    history = not args.no_history

    def work(spark):
        if args.late is not None:
            from airflow_iqp.spark.merge import execute_late

            return execute_late(spark, ws, args.late, backend=args.backend, history=history)
        if args.tail:
            from airflow_iqp.spark.tail import run_tail
            from airflow_iqp.window.batch import Batch

            return run_tail(spark, ws, Batch.from_json(args.tail), args.tail_slots, backend=args.backend,
                            history=history)
        from airflow_iqp.spark.merge import execute_final

        return execute_final(spark, ws, backend=args.backend, expect_units=args.expect_units, history=history)

    code, manifest = run_job("final_job", f"iqp-final-{args.query}-{args.window}", work)
    if code:
        return code
    for m in manifest.get("members", {}).values() or [manifest]:  # a group's tail writes every member's
        print(f"airflow-iqp final_job: wrote {m['result']} from {len(m['partials'])} partials", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
