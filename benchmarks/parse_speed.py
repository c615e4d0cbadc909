"""How long splitting a query takes (goal < 50 ms) and how long Airflow takes to parse each
example DAG file (goal < 1 s): both happen every time a DAG file is parsed.

Each query is split in a fresh Python process (``cold``: the first split, sqlglot's Spark
dialect loaded by it) and then ``--repeat`` more times in that process (``warm``, median).
The queries are those of the catalogue, the example DAGs' own SQL, and a query of five
aggregations of one stream (CTEs joined to each other, scalar subqueries). The DAG files
are timed by ``airflow dags report`` on a throw-away SQLite home.

    python benchmarks/parse_speed.py [--repeat 20] [--json]

Writes benchmarks/results/parse_speed.json and parse_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
GOAL_SPLIT_MS = 50.0
GOAL_DAG_S = 1.0

#: The example DAG's SQL (dags/iqp_revenue.py), timed beside the catalogue.
REVENUE = """SELECT c.region, e.country, sum(e.amount) AS revenue, avg(e.amount) AS avg_order,
       count(DISTINCT e.user_id) AS buyers
FROM events e JOIN countries c ON e.country = c.code WHERE e.amount > 0
GROUP BY c.region, e.country ORDER BY revenue DESC"""

#: Five aggregations of one stream: three CTEs (two joined, one read by a scalar subquery)
#: and two scalar subqueries; a static table joined above.
FIVE_AGGREGATIONS = """WITH daily AS (SELECT country, count(*) AS n, sum(amount) AS revenue FROM events GROUP BY country),
     big AS (SELECT country, count(DISTINCT user_id) AS buyers FROM events WHERE amount > 100 GROUP BY country),
     top AS (SELECT user_id, sum(amount) AS spent FROM events GROUP BY user_id)
SELECT d.country, c.region, d.n, d.revenue, b.buyers, d.revenue / (SELECT sum(amount) FROM events) AS share,
       (SELECT max(spent) FROM top) AS top_spent, (SELECT count(*) FROM events WHERE qty > 5) AS bulk
FROM daily d LEFT JOIN big b ON d.country = b.country LEFT JOIN countries c ON c.code = d.country
ORDER BY d.revenue DESC"""

_CHILD = """
import json, statistics, sys, time
sql, streams, static, repeat = json.loads(sys.argv[1])
t0 = time.perf_counter()
from airflow_iqp.query import decompose
t1 = time.perf_counter()
q = decompose(sql, id="q", streams=streams, static=static)
t2 = time.perf_counter()
warm = []
for _ in range(repeat):
    s = time.perf_counter()
    decompose(sql, id="q", streams=streams, static=static)
    warm.append(time.perf_counter() - s)
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "cold_ms": (t2 - t1) * 1e3, "aggregations": len(q.merges),
                  "warm_ms": statistics.median(warm) * 1e3, "warm_max_ms": max(warm) * 1e3}))
"""


def split_times(repeat: int) -> list[dict]:
    from airflow_iqp.query.catalogue import TPCH_STATIC, TPCH_STREAMS, catalogue_sql, list_queries

    cases = [(q, catalogue_sql(q), list(TPCH_STREAMS), list(TPCH_STATIC)) for q in list_queries()]
    cases.append(("revenue_by_country", REVENUE, ["events"], ["countries"]))
    cases.append(("five_aggregations", FIVE_AGGREGATIONS, ["events"], ["countries"]))
    out = []
    for name, sql, streams, static in cases:
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([sql, streams, static, repeat])],
                              capture_output=True, text=True, check=True)
        out.append({"query": name, **json.loads(proc.stdout)})
    return out


def dag_report() -> list[dict]:
    airflow = str(Path(sys.executable).with_name("airflow"))
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
        env.update({"AIRFLOW_HOME": home, "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
        out = subprocess.run([airflow, "dags", "report", "-o", "json"], env=env, check=True, capture_output=True,
                             text=True).stdout
    report = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("[")))
    rows = []
    for r in report:
        h, m, s = r["duration"].split(":")
        rows.append({"file": r["file"], "dags": len(r["dags"]), "seconds": float(h) * 3600 + float(m) * 60 + float(s)})
    return sorted(rows, key=lambda r: r["file"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    splits, dags = split_times(args.repeat), dag_report()
    result = {"meta": {"python": platform.python_version(), "machine": platform.machine(), "cores": os.cpu_count(),
                       "repeat": args.repeat, "goal_split_ms": GOAL_SPLIT_MS, "goal_dag_s": GOAL_DAG_S},
              "splits": splits, "dag_files": dags}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "parse_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| query | aggregations | split, cold ms | split, warm ms (median / max) | goal |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {s['query']} | {s['aggregations']} | {s['cold_ms']:.1f} | {s['warm_ms']:.1f} / "
              f"{s['warm_max_ms']:.1f} | < {GOAL_SPLIT_MS:.0f} ms |" for s in splits]
    lines += ["", "| DAG file | DAGs | `airflow dags report` s | goal |", "|---|---:|---:|---:|"]
    lines += [f"| {d['file']} | {d['dags']} | {d['seconds']:.3f} | < {GOAL_DAG_S:.0f} s |" for d in dags]
    table = "\n".join(lines) + "\n"
    (RESULTS / "parse_speed.md").write_text(table)
    print(json.dumps(result) if args.json else table)
    worst = max(s["cold_ms"] for s in splits)
    return 0 if worst < GOAL_SPLIT_MS and all(d["seconds"] < GOAL_DAG_S for d in dags) else 1


if __name__ == "__main__":
    sys.exit(main())
