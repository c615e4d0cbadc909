"""A Spark Connect server's peak memory and its shared batches' seconds, by its heap.

For each driver memory (the server's JVM heap) given, starts a fresh Spark Connect server,
warms it with one shared batch of every unit (as the calibration's one batch of the whole
window is), then times shared batches of a group of queries as a window's plan cuts them:
each reads its units once, cached, and collects every query's partial through Arrow
(``benchmarks/shared_read.py``'s round). Records the server's peak RSS over all of it
(``benchmarks/vs_streaming.py``'s sampler: the server and the processes below it) and the
median seconds of each batch size.

Writes ``benchmarks/results/server_memory.json`` and ``.md``.

    python benchmarks/server_memory.py    # 10 queries, SF 1 in 300 units (vs_streaming's data), 512m to 2g
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

from benchmarks.shared_read import one_round, tpch_units  # noqa: E402
from benchmarks.vs_streaming import FULL, RssSampler  # noqa: E402
from iqp_dev.local_airflow import free_port  # noqa: E402
from airflow_iqp.query.catalogue import get_query  # noqa: E402
from airflow_iqp.query.store import Saved  # noqa: E402
from airflow_iqp.spark import connect  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: The shared batches of a window of 300 units as the full benchmark's group plans cut it at 0.2D.
BATCHES = (200, 59, 41)


def measure(memory: str, members: dict, units: list[Path], rounds: int) -> dict:
    """One fresh server at ``memory``: its peak RSS and each batch size's median seconds."""
    port = free_port()
    base = Path(tempfile.mkdtemp(prefix="iqp-server-memory-"))
    files = lambda k: [str(f) for u in units[-k:] for f in sorted(u.glob("*.parquet"))]  # noqa: E731
    with RssSampler() as rss:
        server = connect.start_server(port, base=base, driver_memory=memory)
        spark = connect.connect_session(server["url"])
        try:
            warm = one_round(spark, members, files(len(units)), True)
            times = {k: [one_round(spark, members, files(k), True) for _ in range(rounds)] for k in BATCHES}
        finally:
            spark.stop()
            connect.stop_server(port, base=base)
    return {"memory": memory, "peak_rss_mb": round(rss.peak, 1), "peak_rss_processes": rss.at_peak,
            "warm_seconds": round(warm, 2), "seconds": {str(k): round(statistics.median(v), 2) for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory", default="512m,768m,1g,2g", help="driver memories to measure (comma-separated)")
    ap.add_argument("--queries", default=",".join(FULL["queries"]))
    ap.add_argument("--scale", type=float, default=FULL["scale"])
    ap.add_argument("--units", type=int, default=FULL["units"])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    data, units, streams = tpch_units(args.scale, args.units)
    members = {q: Saved(get_query(q), streams, str(data / "static")) for q in args.queries.split(",")}
    rows = []
    for memory in args.memory.split(","):
        rows.append(measure(memory, members, units, args.rounds))
        print({k: v for k, v in rows[-1].items() if k != "peak_rss_processes"}, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"queries": list(members), "scale": args.scale, "units": args.units, "rounds": args.rounds,
            "machine": f"{platform.node()} ({platform.machine()})", "commit": commit, "date": time.strftime("%Y-%m-%d")}
    (RESULTS / "server_memory.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# A Spark Connect server's peak memory and its shared batches, by its heap", "",
             f"{', '.join(meta['queries'])} on SF {args.scale} in {args.units} units, a fresh server per heap, "
             f"{meta['machine']}, {meta['date']} at {commit}. Warmed with one shared batch of every unit; then "
             f"shared batches of {', '.join(map(str, BATCHES))} units (read once, cached, every query's partial "
             f"collected through Arrow), median of {args.rounds}. Peak RSS: the server and the processes below it.",
             "", "| heap | peak RSS MB | warm-up batch s | " + " | ".join(f"{k} units s" for k in BATCHES) + " |",
             "|---|---:|---:|" + "---:|" * len(BATCHES)]
    lines += [f"| {r['memory']} | {r['peak_rss_mb']:.0f} | {r['warm_seconds']} | "
              + " | ".join(str(r["seconds"][str(k)]) for k in BATCHES) + " |" for r in rows]
    (RESULTS / "server_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
