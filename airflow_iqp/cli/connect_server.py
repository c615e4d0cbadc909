"""``airflow-iqp connect-server start|stop|status``: the shared Spark Connect server on 127.0.0.1.

The same launch as Spark's ``sbin/start-connect-server.sh`` (through pyspark's own
``spark-daemon.sh``), with the local-mode defaults of this package. Point the Airflow
connection ``spark_connect_default`` (type ``spark_connect``) at the printed URL.
"""

from __future__ import annotations

import json


def add_parser(subparsers):
    p = subparsers.add_parser("connect-server", help="start, stop or inspect the local Spark Connect server",
                              description=__doc__)
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, default=None, help="gRPC port (default 15002)")
    p.add_argument("--dir", help="pid and log directory (default $IQP_CONNECT_DIR or ~/.airflow-iqp/connect)")
    p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
    p.add_argument("--driver-memory", default="2g", help="the server JVM's heap (default 2g)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    return p


def run(args) -> int:
    from airflow_iqp.cli.run_window import parse_conf
    from airflow_iqp.spark.connect import DEFAULT_PORT, server_status, start_server, stop_server

    port = args.port or DEFAULT_PORT
    if args.action == "start":
        info = start_server(port, base=args.dir, master=args.master, conf=parse_conf(args.conf),
                            driver_memory=args.driver_memory)
    elif args.action == "stop":
        info = {**server_status(port, args.dir), "stopped": stop_server(port, base=args.dir)}
    else:
        info = server_status(port, args.dir)
    print(json.dumps(info))
    return 0 if args.action != "status" or info["running"] else 1
