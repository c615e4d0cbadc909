"""The fault suite's table: the twelve faults of ``tests/cluster/test_faults.py``, run on the
cluster harness (PostgreSQL, Spark standalone, Spark Connect, Airflow as real processes).

It runs the same cases as the test module (``tests/cluster/fault_scenario.py`` drives them,
``tests/cluster/fault_checks.py`` judges them) and writes, per fault, how it was detected,
how long the recovery took, and whether the result was correct, no unit lost or counted
twice, and the deadline met:

    python benchmarks/faults.py        # about 7 minutes; writes benchmarks/results/faults.{json,md}
    python benchmarks/faults.py --store s3 --out benchmarks/results/faults_s3
                                       # the same with the state and the partials on an S3 server

``recovery_seconds``: from the fault to the affected batch's partial written again (faults
1, 2, 5, 6), to the restarted triggerer holding every trigger (3), to the first task the
restarted scheduler started (4), from the clear to the rerun's end (12); 0 where the
provider handles the fault in the batch that meets it (7 to 10), none for 11.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.fault_checks import NAMES, verdict
from tests.cluster.fault_scenario import run_faults

RESULTS = ROOT / "benchmarks" / "results"
COLUMNS = ("fault", "detected_by", "recovery_seconds", "result_correct", "units_lost", "units_double_counted",
           "deadline_met")


def markdown(rows: list[dict], meta: dict) -> str:
    def cell(v) -> str:
        return "—" if v is None else ("yes" if v is True else "no" if v is False else str(v))

    store = {"s3": "the state store and the partials on an S3-compatible server (moto's)"}.get(
        meta.get("store", "local"), "the local state store")
    lines = [(f"Measured {meta['date']} at commit {meta['commit']} on {meta['machine']}, {store}; the whole run took "
              f"{meta['wall_seconds']:.0f} s."), "",
             ("| fault | detected by | recovery s | result correct | units lost | units counted twice "
              "| deadline met |"),
             "|---|---|---:|:---:|---:|---:|:---:|"]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    problems = [f"- fault {r['fault']}: {p}" for r in rows for p in r.get("problems", [])]
    if problems:
        lines += ["", "Problems:", *problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "faults"), help="path without suffix of the .json and .md")
    parser.add_argument("--keep", metavar="DIR", help="run under DIR and keep it: the cluster's process logs, "
                                                      "the DAGs' landing and state directories")
    parser.add_argument("--store", choices=("local", "s3"), default="local",
                        help="the state store: a directory (default), or a prefix on an S3-compatible server "
                             "(moto's, as a process: iqp_dev/s3.py) that Spark writes partials to through S3A")
    args = parser.parse_args(argv)
    t0 = time.time()
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="iqp-faults-"))
        state, spark_conf = None, None
        if args.store == "s3":
            from iqp_dev.s3 import CREDENTIALS, s3_server
            from iqp_dev.s3a import s3a_spark_conf

            server = stack.enter_context(s3_server(Path(tmp) / "s3"))
            state = server.bucket("faults") + "/state"
            spark_conf = s3a_spark_conf(server.endpoint, CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                        CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        run = run_faults(Path(tmp), keep=bool(args.keep), state=state, spark_conf=spark_conf)
        verdicts = [verdict(run, n) for n in sorted(NAMES)]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)), "commit": commit,
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}", "wall_seconds": time.time() - t0,
            "store": args.store}
    rows = [{**v.row, **({"problems": v.problems} if v.problems else {})} for v in verdicts]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "faults": rows}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))
    return 0 if not any(v.problems for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
