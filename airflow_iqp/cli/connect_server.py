"""``airflow-iqp connect-server start|stop|status``: the shared Spark Connect server on 127.0.0.1.

The same launch as Spark's ``sbin/start-connect-server.sh`` (through pyspark's own
``spark-daemon.sh``), with the local-mode defaults of this package. Point the Airflow
connection ``spark_connect_default`` (type ``spark_connect``) at the printed URL.
``start --warm-up Q1,Q2 --data DIR`` then runs those queries over DIR's units until the
server's JVM is warm (:func:`airflow_iqp.spark.calibrate.warm_up`): a fresh server runs
its first batches up to 3 times slower than the calibrated costs.

The server listens on 127.0.0.1. ``--host`` binds it elsewhere only when the environment
variable ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` holds a token, which the server then asks of
every client (put the same token in the connection's password). The token is read from
the environment so that it never shows on a command line, and it is never printed.
"""

from __future__ import annotations

import json


def add_parser(subparsers):
    p = subparsers.add_parser("connect-server", help="start, stop or inspect the local Spark Connect server",
                              description=__doc__)
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, default=None, help="gRPC port (default 15002)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1); any other needs SPARK_CONNECT_AUTHENTICATE_TOKEN")
    p.add_argument("--dir", help="pid and log directory (default $IQP_CONNECT_DIR or ~/.airflow-iqp/connect)")
    p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
    from airflow_iqp.spark.connect import DEFAULT_DRIVER_MEMORY

    p.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY,
                   help=f"the server JVM's heap (default {DEFAULT_DRIVER_MEMORY})")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.add_argument("--warm-up", metavar="QUERIES", help="start: then run these queries (comma-separated) over --data")
    p.add_argument("--data", help="generated data dir (units/ + static/) or a landing dir, for --warm-up")
    p.add_argument("--rounds", type=int, default=2, help="warm-up rounds (default 2)")
    return p


def run(args) -> int:
    from airflow_iqp.cli.run_window import parse_conf
    from airflow_iqp.spark.connect import DEFAULT_PORT, redact_url, server_status, start_server, stop_server

    from airflow_iqp.errors import ConfigError

    port = args.port or DEFAULT_PORT
    if args.warm_up and (args.action != "start" or not args.data):
        raise ConfigError("--warm-up goes with start and needs --data", field="warm_up")
    if args.action == "start":
        info = start_server(port, base=args.dir, master=args.master, conf=parse_conf(args.conf),
                            driver_memory=args.driver_memory, host=args.host)
        if args.warm_up:
            from airflow_iqp.backends import SparkConnect
            from airflow_iqp.spark.calibrate import warm_up

            with SparkConnect.calibration_runner(url=info["url"], server_pid=info["pid"]) as runner:
                info["warm_up"] = warm_up(runner, args.warm_up.split(","), args.data, rounds=args.rounds)
    elif args.action == "stop":
        info = {**server_status(port, args.dir), "stopped": stop_server(port, base=args.dir)}
    else:
        info = server_status(port, args.dir)
    print(json.dumps({**info, "url": redact_url(info["url"])}))
    return 0 if args.action != "status" or info["running"] else 1
