"""spark-submit application: one batch's partial aggregation (:mod:`airflow_iqp.spark.batch`).

    spark-submit batch_job.py (--work JSON | --work-file PATH) --backend NAME [--no-history]

The work (:func:`~airflow_iqp.spark.batch.batch_work`) says which files the batch reads and
where its partial and metrics go. No Airflow import here: this file runs on a Spark driver.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batch_job.py", description=__doc__.split("\n")[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--work", help="the batch's work, JSON")
    given.add_argument("--work-file", help="a file holding the batch's work, JSON")
    parser.add_argument("--backend", required=True, help="the backend's name, as the cost history records it")
    parser.add_argument("--no-history", action="store_true")
    args = parser.parse_args(argv)

    from airflow_iqp.spark.batch import execute_batch
    from airflow_iqp.spark.entry import load_work, run_job

    work = load_work(args.work, args.work_file)
    code, metrics = run_job("batch_job", f"iqp-batch-{work['query']}-{work['window']}-{work['batch']}",
                            lambda spark: execute_batch(spark, work, backend=args.backend, history=not args.no_history))
    if code:
        return code
    if metrics.get("written_at") is None:
        print("airflow-iqp batch_job: every unit was quarantined when claimed; nothing to write", flush=True)
    elif metrics.get("members"):
        print(f"airflow-iqp batch_job: wrote the partials of {', '.join(metrics['members'])} from one read "
              f"({metrics['units']} units, {metrics['wall_seconds']:.2f}s)", flush=True)
    else:
        print(f"airflow-iqp batch_job: wrote {work['partial']} ({metrics['rows_out']} rows, "
              f"{metrics['wall_seconds']:.2f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
