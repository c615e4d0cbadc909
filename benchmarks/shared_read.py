"""A shared batch's read: cached for its queries, or read by each query itself.

A group's batch reads its units once for every query (``airflow_iqp.spark.batch.read_shared``).
Caching a stream's DataFrame reads and stores every column of it for the queries after the
first; a query that reads it alone reads only its own columns from the Parquet files. This
measures, on a Spark Connect server started here, the seconds of the read and every query's
partial (collected through Arrow, as a partial is written) with the streams persisted and
without, for a few units and for more, for one query and for three. Each cell alternates the
two ways, after one untimed round of both, and reports the median.

Writes ``benchmarks/results/shared_read.json`` and ``benchmarks/results/shared_read.md``.

    python benchmarks/shared_read.py             # SF 0.5 in 100 units, 5 rounds (about 5 minutes)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iqp_dev.local_airflow import free_port  # noqa: E402
from airflow_iqp.filecheck import inspect_files  # noqa: E402
from airflow_iqp.inputs.tpch import generate, streams_at  # noqa: E402
from airflow_iqp.query.catalogue import get_query  # noqa: E402
from airflow_iqp.query.store import Saved  # noqa: E402
from airflow_iqp.spark import connect  # noqa: E402
from airflow_iqp.spark.batch import _union_streams, reader_of_all  # noqa: E402
from airflow_iqp.spark.steps import partial_of  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GROUPS = (("cq3",), ("cq3", "q1", "q6"))
UNITS = (7, 20)


def tpch_units(scale: float, n: int) -> tuple[Path, list[Path], tuple]:
    """The benchmarks' TPC-H data at ``scale`` in ``n`` units (generated once): its directory,
    its units in order, and their streams."""
    data = RESULTS / "tmp" / f"tpch-sf{scale}-n{n}"
    if not (data / "units").is_dir():
        generate(scale, n, data, overwrite=True)
    return data, sorted((data / "units").iterdir()), streams_at(data / "units")


def one_round(spark, members: dict, files: list[str], cached: bool) -> float:
    """Seconds to read ``files`` once for ``members`` and collect each member's partial."""
    t0 = time.perf_counter()
    inspection = inspect_files(files, reader_of_all(members))
    tables = _union_streams(spark, members, inspection)
    if cached:
        tables = {n: df.persist() for n, df in tables.items()}
    for saved in members.values():
        partial_of(spark, saved, tables).toArrow()
    if cached:
        for df in tables.values():
            df.unpersist()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--units", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    data, units, streams = tpch_units(args.scale, args.units)
    port = free_port()
    base = Path(tempfile.mkdtemp(prefix="iqp-shared-read-"))
    server = connect.start_server(port, base=base)
    spark = connect.connect_session(server["url"])
    rows = []
    try:
        for names in GROUPS:
            members = {q: Saved(get_query(q), streams, str(data / "static")) for q in names}
            for k in UNITS:
                files = [str(f) for u in units[-k:] for f in sorted(u.glob("*.parquet"))]
                one_round(spark, members, files, True), one_round(spark, members, files, False)  # untimed
                times = {True: [], False: []}
                for _ in range(args.rounds):
                    for cached in (True, False):
                        times[cached].append(one_round(spark, members, files, cached))
                rows.append({"queries": list(names), "units": k, "rounds": args.rounds,
                             "cached_s": round(statistics.median(times[True]), 3),
                             "uncached_s": round(statistics.median(times[False]), 3)})
                print(rows[-1], flush=True)
    finally:
        spark.stop()
        connect.stop_server(port, base=base)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"scale": args.scale, "units": args.units, "machine": f"{platform.node()} ({platform.machine()})",
            "commit": commit, "date": time.strftime("%Y-%m-%d")}
    (RESULTS / "shared_read.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# A shared batch's read: cached, or read by each query", "",
             f"SF {args.scale} in {args.units} units, on a Spark Connect server started by the script, "
             f"{meta['machine']}, {meta['date']} at {commit}. Seconds to read the last k units once and collect "
             "every query's partial through Arrow; median of the rounds, the two ways alternating.", "",
             "| queries | units | cached s | read by each s |", "|---|---:|---:|---:|"]
    lines += [f"| {', '.join(r['queries'])} | {r['units']} | {r['cached_s']} | {r['uncached_s']} |" for r in rows]
    (RESULTS / "shared_read.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
