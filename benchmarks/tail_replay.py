"""What each query of a group's fused tail costs after the window's end, alone on an idle server.

A group's fused tail (``airflow_iqp.spark.group_tail``) runs, after the window's end, each
query's step on the last batch's units and its merge with its written partials into its
result. This replays that work on a copy of a finished run's state (by default the group of
``benchmarks/vs_streaming.py``'s ``iqp_group_connect_0.1D`` run), on a Spark Connect server
started here, one query at a time, and writes each result to a scratch directory that it then
removes. Two ways, each for ``--rounds`` rounds:

- ``whole``: the step on every unit of the last batch's claim, then the merge;
- ``ahead``: the step on all but the claim's last ``--after`` units done first, cached and
  not timed (what a tail that stepped on the arrived units during its lead would leave),
  then the step on those last units and the merge.

Each cell gives the first round and the median of the others: the first run of a plan's
shape in the server pays its code generation. Against a benchmark run's tail, which runs
in the server after a window of batches and beside Airflow's processes, the difference is
what that setting costs.

Writes ``benchmarks/results/tail_replay.json`` and ``benchmarks/results/tail_replay.md``.

    python benchmarks/tail_replay.py            # after a vs_streaming.py run; about 3 minutes
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iqp_dev.local_airflow import free_port  # noqa: E402
from airflow_iqp.filecheck import files_to_read, inspect_files, unit_of  # noqa: E402
from airflow_iqp.query.store import load_query  # noqa: E402
from airflow_iqp.spark import connect  # noqa: E402
from airflow_iqp.spark.steps import parquet_writer, run_batch, run_final  # noqa: E402
from airflow_iqp.spark.tail import read_written, release  # noqa: E402
from airflow_iqp.store import open_store  # noqa: E402
from airflow_iqp.streams import stream_of  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
STATE = RESULTS / "tmp" / "vs_streaming" / "iqp_group_connect_0.1D" / "state"
#: Where the units the run landed are kept: its landing directory holds copies of them, and
#: the benchmark's next run removes it.
UNITS = RESULTS / "tmp" / "tpch-sf1.0-n300" / "units"


def one_round(spark, ws, saved, files: list[str], claim: dict, ahead_files: list[str]) -> float:
    """Seconds of a query's tail after the window's end: its step on ``files`` (beside its
    step on ``ahead_files``, computed before the clock starts) merged with its partials."""
    written = read_written(spark, ws)
    record = ws.store.query(ws.query_id)
    part_ahead = None
    if ahead_files:
        part_ahead = run_batch(spark, saved, ahead_files, None,
                               inspection=inspect_files(ahead_files, saved, record, checked=claim.get("checked")))
        part_ahead = part_ahead.persist()
        part_ahead.count()
    t0 = time.perf_counter()
    step = run_batch(spark, saved, files, None, inspection=inspect_files(files, saved, record,
                                                                        checked=claim.get("checked")))
    if part_ahead is not None:
        step = part_ahead.unionByName(step)
    ws.write_scratch("replay", parquet_writer(run_final(spark, saved, written["df"] if written else [], also=step)))
    seconds = time.perf_counter() - t0
    ws.remove_scratch("replay")
    if part_ahead is not None:
        part_ahead.unpersist()
    release(written)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", default=str(STATE), help="a finished run's state directory")
    p.add_argument("--group", default="bench_group")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--after", type=int, default=4, help="units of the last batch that came after the work ahead")
    p.add_argument("--units", default=str(UNITS), help="the landed units, where the run's landing is gone")
    p.add_argument("--name", default="tail_replay")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iqp-tail-replay-"))
    state = work / "state"
    shutil.copytree(args.state, state)  # the replay writes scratch results: never into the run's own state
    store = open_store(state)
    group_dir = state / args.group
    window = sorted(d.name for d in group_dir.iterdir() if d.is_dir() and d.name[:1].isdigit())[-1]
    group = store.window(args.group, window)
    plan = group.doc("plan")
    last = max(b["index"] for b in plan["batches"])
    claim = group.claim_of(last)
    landing = plan["batches"][-1]["landing"]
    if not Path(landing).is_dir():  # read the same units where they are kept
        claim = {**claim, "files": [str(Path(args.units) / Path(f).relative_to(landing)) for f in claim["files"]],
                 "checked": {str(Path(args.units) / Path(f).relative_to(landing)): n
                             for f, n in (claim.get("checked") or {}).items()}}
    members = plan["batches"][-1]["members"]
    port = free_port()
    server = connect.start_server(port, base=work / "connect")
    spark = connect.connect_session(server["url"])
    rows = []
    try:
        for m in members:
            ws, saved = store.window(m, window), load_query(m, store)
            files = [f for f in files_to_read(claim) if stream_of(f, saved.streams).name in saved.query.streams]
            units = list(dict.fromkeys(unit_of(f, stream_of(f, saved.streams)) for f in files))
            late = set(units[-args.after:])
            after = [f for f in files if unit_of(f, stream_of(f, saved.streams)) in late]
            before = [f for f in files if f not in after]
            row = {"query": m, "units": len(units), "after": len(late)}
            for way, (now, ahead) in (("whole", (files, [])), ("ahead", (after, before))):
                runs = [one_round(spark, ws, saved, now, claim, ahead) for _ in range(args.rounds)]
                row[way] = {"first": round(runs[0], 3), "median_rest": round(statistics.median(runs[1:]), 3),
                            "runs": [round(r, 3) for r in runs]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        spark.stop()
        connect.stop_server(port, base=work / "connect")
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "machine": f"{platform.node()} ({platform.machine()}, {platform.os.cpu_count()} cores)",
            "state": str(Path(args.state).relative_to(ROOT)) if Path(args.state).is_relative_to(ROOT) else args.state,
            "window": window, "rounds": args.rounds, "after": args.after}
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# A group tail's queries after the window's end, one at a time on an idle Connect server",
             "", f"{meta['date']}, commit {commit}, {meta['machine']}; the last batch of window {window} of "
             f"`{meta['state']}`; {args.rounds} rounds each, the first and the median of the rest (s).", "",
             "| query | units | whole: first | whole: median | ahead of the last "
             f"{args.after}: first | ahead: median |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['query']} | {r['units']} | {r['whole']['first']:.2f} | {r['whole']['median_rest']:.2f} | "
              f"{r['ahead']['first']:.2f} | {r['ahead']['median_rest']:.2f} |" for r in rows]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
