"""How long one poll of a flat landing directory takes when it holds many older files
(issue: a data engineer's first hour; goal: under 1 s and under 200 MB).

A flat directory grows without end: every window's files land in it, and a window's files
are the ones that arrived in it (their last-modified times). The directory is filled with
``--older`` files of earlier windows (default 100,000, last-modified over the past days)
and ``--new`` files of the current window. One poll is what a waiting batch does: list the
window's complete units (:func:`airflow_iqp.landing.list_units` with the window bound to the
stream). Polls are timed in a fresh process, whose peak resident memory is reported too,
so the files' creation does not count. The same poll is timed with 10 % and 100 % of the
older files, to show how the time grows with the directory.

    python benchmarks/listing.py [--older 100000] [--new 50] [--polls 20] [--dir DIR]

Writes benchmarks/results/listing.json and listing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
GOAL_S, GOAL_MB = 1.0, 200.0

POLL = r"""
import json, resource, statistics, sys, time
from airflow_iqp.landing import list_units
from airflow_iqp.streams import Stream

root, start, end, polls = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
stream = Stream("clicks", path=root, format="csv").for_window(start, end)
times, found = [], 0
for _ in range(polls):
    t = time.perf_counter()
    found = len(list_units(root, (stream,)))
    times.append(time.perf_counter() - t)
print(json.dumps({"found": found, "median_s": statistics.median(times), "max_s": max(times),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def fill(root: Path, older: int, new: int, window_start: float) -> None:
    """``older`` files last modified over the days before the window, ``new`` inside it."""
    root.mkdir(parents=True, exist_ok=True)
    body = b"user_id,page,latency_ms\n1,/,12\n"
    for i in range(older):
        path = root / f"part-{i:07d}.csv"
        path.write_bytes(body)
        at = window_start - 60 - (i * 7.0) % (3 * 86400)
        os.utime(path, (at, at))
    for i in range(new):
        path = root / f"new-{i:05d}.csv"
        path.write_bytes(body)
        at = window_start + 1 + i
        os.utime(path, (at, at))


def poll(root: Path, start: float, end: float, polls: int) -> dict:
    out = subprocess.run([sys.executable, "-c", POLL, str(root), str(start), str(end), str(polls)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--older", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=50)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--dir", help="where to make the directories (default: a temporary directory)")
    args = ap.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="iqp-listing-"))
    start = time.time() // 60 * 60
    end = start + max(args.new + 2, 120)
    rows = []
    try:
        for older in sorted({max(1, args.older // 10), args.older}):
            root = base / f"flat-{older}"
            t = time.perf_counter()
            fill(root, older, args.new, start)
            made = time.perf_counter() - t
            res = poll(root, start, end, args.polls)
            assert res["found"] == args.new, res
            rows.append({"older_files": older, "window_files": args.new, "polls": args.polls,
                         "fill_seconds": round(made, 1), **{k: round(v, 4) for k, v in res.items()}})
            print(f"{older:>8} older files: poll median {res['median_s'] * 1000:.0f} ms, max "
                  f"{res['max_s'] * 1000:.0f} ms, peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    head = next(r for r in rows if r["older_files"] == args.older)
    doc = {"benchmark": "listing", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "commit": _commit(), "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
           f"{platform.python_version()}", "goal": {"poll_seconds": GOAL_S, "peak_rss_mb": GOAL_MB},
           "met": head["max_s"] < GOAL_S and head["peak_rss_mb"] < GOAL_MB, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "listing.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"Polls of a flat directory (list the window's units), {doc['measured_at']} at {doc['commit']}; "
             f"{doc['machine']}. Goal: under {GOAL_S:g} s and {GOAL_MB:g} MB.", "",
             "| older files | window's files | poll median | poll max | peak RSS |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['older_files']:,} | {r['window_files']} | {r['median_s'] * 1000:.0f} ms | "
              f"{r['max_s'] * 1000:.0f} ms | {r['peak_rss_mb']:.0f} MB |" for r in rows]
    (RESULTS / "listing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if doc["met"] else 1


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
