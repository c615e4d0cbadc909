"""``airflow-iqp run-window``: run one window offline (no Airflow): K batch jobs + one final job."""

from __future__ import annotations

import json
import sys

from airflow_iqp.cli.query_args import add_query_args, saved_from_args


def add_parser(subparsers):
    p = subparsers.add_parser("run-window", help="run one window's batches and final aggregation via spark-submit",
                              description=__doc__)
    p.add_argument("--query", help="a catalogued query's id, e.g. cq2 or q4 (with --data); or give --sql")
    p.add_argument("--data", help="with --query: generated data dir (units/ + static/) or a landing dir")
    p.add_argument("--static-dir", help="with --query: static tables dir (needed with a landing dir for joins)")
    add_query_args(p, required=False)
    p.add_argument("--batches", type=int, required=True, help="number K of consecutive batches")
    p.add_argument("--out", required=True, help="state directory (claims, partials, result)")
    p.add_argument("--window-id", default="w0", help="window id in the state directory (default w0)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.add_argument("--ship-package", action="store_true", help="ship airflow_iqp as --py-files (non-local masters do)")
    p.add_argument("--json", action="store_true", help="print the run report as JSON")
    return p


def parse_conf(items: list[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a dict; a clear error for one without ``=``."""
    from airflow_iqp.errors import ConfigError

    conf = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected KEY=VALUE, got {item!r}", field="conf")
        k, v = item.split("=", 1)
        conf[k] = v
    return conf


def run(args) -> int:
    from airflow_iqp.backends import SparkSubmit
    from airflow_iqp.errors import ConfigError
    from airflow_iqp.spark.window import run_window

    conf = parse_conf(args.conf)
    sql = args.sql is not None or args.sql_file is not None
    if sql == bool(args.query):
        raise ConfigError("give --query QID --data DIR, or --sql (or --sql-file) with --stream NAME=DIR", "query")
    if sql and not args.stream:
        raise ConfigError("--sql needs the streams' directories: --stream NAME=DIR", "stream")
    if args.query and not args.data:
        raise ConfigError("--query needs --data DIR", "data")
    query = saved_from_args(args, check_files=True) if sql else args.query
    # Its jobs are spark-submits: their metrics and cost history are that backend's.
    report = run_window(query, args.data, args.batches, args.out, static=args.static_dir, window_id=args.window_id,
                        master=args.master, conf=conf, ship_package=args.ship_package or None,
                        backend=SparkSubmit.name,
                        log=None if args.json else (lambda m: print(m, file=sys.stderr, flush=True)))
    if args.json:
        out = {
            "result": report["result"],
            "batches": [{k: b[k] for k in ("batch", "units", "files", "wall_seconds", "cpu_seconds")} |
                        {"job": {k: b["job"].get(k) for k in ("wall_seconds", "cpu_seconds", "task_seconds",
                                                               "rows_in", "rows_out", "bytes")}}
                        for b in report["batches"]],
            "final": {k: report["final"][k] for k in ("wall_seconds", "cpu_seconds")} |
                     {"job": {k: report["final"]["job"].get(k) for k in ("wall_seconds", "cpu_seconds",
                                                                          "task_seconds", "rows_out")}},
        }
        print(json.dumps(out))
    else:
        print(report["result"])
    return 0
