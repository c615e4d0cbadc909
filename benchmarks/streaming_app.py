"""spark-submit application of ``vs_streaming.py``: the catalogue's queries as Spark Structured Streaming.

    spark-submit streaming_app.py --queries cq3,q1 --landing L --static S --out O --checkpoint C
        (--trigger default | --trigger SECONDS | --available-now) [--units N] [--final]

* A query over one stream (static joins allowed) runs natively: its per-batch SQL over a
  file stream of ``L/[0-9]*/<stream>.parquet`` is a stateful aggregation, written in
  complete mode through ``foreachBatch`` to ``O/<q>/agg`` (overwritten each micro-batch).
  Its final SQL over that aggregate is the result.
* A query joining orders with lineitem cannot run as a stream-stream aggregate in Spark;
  it joins inside each micro-batch (``foreachBatch`` over the orders stream: the
  micro-batch's units, both streams' files, the catalogue's per-batch step), keeps one
  partial per micro-batch in ``O/<q>/partials/``, and its final step merges them.
* ``--trigger default`` / ``SECONDS`` runs until ``--units`` units have been processed for
  every query, then writes the results. ``--available-now`` processes what has landed and
  stops (with a checkpoint, only what is new since the last run); with ``--final`` it then
  writes the results.

Writes ``O/<q>/result`` (parquet, atomically) and ``O/<run-name>.json`` with the
time each result was written. Uses only ``airflow_iqp``'s catalogue and steps; no Airflow.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queries", required=True)
    p.add_argument("--landing", required=True)
    p.add_argument("--static", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger", default="default", help="'default' or a processing-time interval in seconds")
    p.add_argument("--available-now", action="store_true")
    p.add_argument("--units", type=int, help="stop after this many units (continuous triggers)")
    p.add_argument("--final", action="store_true", help="write the results (always, for continuous triggers)")
    p.add_argument("--name", default="run")
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from airflow_iqp.inputs.tpch import schema_ddl, streams_at
    from airflow_iqp.query.catalogue import get_query
    from airflow_iqp.spark.steps import read_static, run_batch, write_atomic
    from airflow_iqp.streams import files_of

    tpch = {s.name: s for s in streams_at()}

    spark = SparkSession.builder.appName(f"iqp-bench-{args.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    out, ckpt, landing = Path(args.out), Path(args.checkpoint), Path(args.landing)
    queries = [get_query(q) for q in args.queries.split(",")]
    lock = threading.Lock()
    seen_units: dict[str, set] = {q.id: set() for q in queries}
    handles = {}

    def trigger(writer):
        if args.available_now:
            return writer.trigger(availableNow=True)
        if args.trigger != "default":
            return writer.trigger(processingTime=f"{float(args.trigger)} seconds")
        return writer

    def src(stream):
        return spark.readStream.schema(schema_ddl(stream)).parquet(str(landing / "[0-9]*" / f"{stream}.parquet"))

    for q in queries:
        qout = out / q.id
        qout.mkdir(parents=True, exist_ok=True)
        if len(q.streams) == 1:
            tables = {q.streams[0]: src(q.streams[0])}
            for t in q.static:
                tables[t] = read_static(spark, args.static, t)
            agg = q.compute_partial(spark, tables)

            def sink(df, epoch, qout=qout):
                df.write.mode("overwrite").parquet(str(qout / "agg"))

            w = agg.writeStream.outputMode("complete").foreachBatch(sink)
        else:
            def sink(df, epoch, q=q, qout=qout):
                # The micro-batch's units, from the file paths of its orders (a foreachBatch
                # DataFrame has no inputFiles(): it is an RDD of the rows already read).
                files = [r["f"] for r in df.distinct().collect()]
                if not files:
                    return
                units = sorted({Path(urlparse(f).path).parent for f in files})
                part = run_batch(spark, q.id, files_of(units, [tpch[s] for s in q.streams]), args.static)
                part.write.mode("overwrite").parquet(str(qout / "partials" / f"epoch-{epoch:06d}"))
                with lock:
                    seen_units[q.id].update(u.name for u in units)

            w = src("orders").select(F.col("_metadata.file_path").alias("f")).writeStream.foreachBatch(sink)
        w = trigger(w.option("checkpointLocation", str(ckpt / q.id)).queryName(f"{args.name}_{q.id}"))
        handles[q.id] = w.start()

    finished = {}

    def rows_processed(h) -> int:
        return sum(p["numInputRows"] for p in h.recentProgress)

    def finish(q):
        qout = out / q.id
        if len(q.streams) == 1:
            partials = spark.read.parquet(str(qout / "agg"))
        else:
            paths = sorted(str(x) for x in (qout / "partials").glob("epoch-*"))
            partials = spark.read.parquet(*paths)
        write_atomic(q.compute_final(spark, partials), qout / "result")
        finished[q.id] = time.time()

    if args.available_now:
        for h in handles.values():
            h.awaitTermination()
        if args.final:
            for q in queries:
                finish(q)
    else:
        expected = {}
        for q in queries:
            if len(q.streams) == 1:
                expected[q.id] = ("rows", _expected_rows(landing, q.streams[0], args.units))
            else:
                expected[q.id] = ("units", args.units)
        pending = list(queries)
        while pending:
            for q in list(pending):
                h = handles[q.id]
                if h.exception():
                    raise RuntimeError(f"{q.id}: {h.exception()}")
                kind, want = expected[q.id]
                have = rows_processed(h) if kind == "rows" else len(seen_units[q.id])
                if want is not None and have >= want and not h.status["isTriggerActive"]:
                    h.stop()
                    finish(q)
                    pending.remove(q)
            time.sleep(0.2)
    for h in handles.values():
        if h.isActive:
            h.stop()
    (out / f"{args.name}.json").write_text(json.dumps({"finished": finished, "at": time.time()}))
    spark.stop()
    return 0


def _expected_rows(landing: Path, stream: str, units: int | None):
    """Rows of ``stream`` in the first ``units`` units, known up front from the source's footers."""
    src = os.environ.get("IQP_BENCH_SOURCE_UNITS")
    if not src or units is None:
        return None
    import pyarrow.parquet as pq

    dirs = sorted(p for p in Path(src).iterdir() if p.is_dir() and not p.name.startswith("."))[:units]
    return sum(pq.ParquetFile(d / f"{stream}.parquet").metadata.num_rows for d in dirs)


if __name__ == "__main__":
    sys.exit(main())
