"""``airflow-iqp calibrate``: measure a query at several batch sizes on a backend, fit, store the fit.

Fits the piecewise linear batch cost (seconds by units; its value at zero units is the
backend's per-batch overhead) and the final aggregation (seconds by partials merged),
appends both to the cost history the plan operator reads (``STATE/cost_history.jsonl``),
prints them and plots measured against fitted cost.

``--backend`` is a backend's name (:mod:`airflow_iqp.backends`), which runs and measures
the calibration: ``spark-connect`` uses the server at ``--url``, or the local server on
``--port`` (started for the calibration and stopped after, unless it was running).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def add_parser(subparsers):
    from airflow_iqp.backends import names

    p = subparsers.add_parser("calibrate", help="fit a query's batch and final-aggregation costs on a backend",
                              description=__doc__)
    p.add_argument("--query", required=True, help="query id, e.g. cq3 or q1")
    p.add_argument("--data", required=True, help="generated data dir (units/ + static/) or a landing dir")
    p.add_argument("--backend", choices=names(), default=names()[0],
                   help=f"the backend that runs the batches (default {names()[0]})")
    p.add_argument("--state-dir", help="where the cost history is (default: [iqp] state_dir)")
    p.add_argument("--sizes", help="comma-separated batch sizes in units (default 1,2,5,10,20,50,... as fit); "
                                   "a size that does not fit beside the ones before it runs on the units again")
    p.add_argument("--finals", help="comma-separated partial counts to merge (default 1,2,4,all)")
    p.add_argument("--repeat", type=int, default=1, help="measure each size this many times (default 1)")
    p.add_argument("--url", help="Spark Connect URL, sc://host:port (spark-connect)")
    p.add_argument("--port", type=int, help="local Spark Connect server port (default 15002; spark-connect)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*]; spark-submit)")
    p.add_argument("--plot", help="PNG path (default calibration-<query>-<backend>.png here)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _ints(text: str | None, option: str) -> list[int] | None:
    from airflow_iqp.errors import ConfigError

    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"expected comma-separated whole numbers, got {text!r}", field=option) from None


def run(args) -> int:
    from airflow_iqp import backends, config
    from airflow_iqp.spark.calibrate import calibrate, plot_calibration
    from airflow_iqp.store import open_store

    state_dir = args.state_dir or config.state_dir()
    say = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    backend = backends.get(args.backend, "backend")
    with backend.calibration_runner(master=args.master, url=args.url, port=args.port, log=say) as runner:
        report = calibrate(args.query, args.data, runner, state_dir=state_dir, sizes=_ints(args.sizes, "sizes"),
                           final_counts=_ints(args.finals, "finals"), repeat=args.repeat, log=say)
    plot = Path(args.plot) if args.plot else Path(f"calibration-{report['query']}-{report['backend']}.png")
    report["plot"] = str(plot_calibration(report, plot))
    report["server_startup_seconds"] = runner.startup_seconds
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "record"}))
        return 0
    print(f"{report['query']} on {report['backend']}: per-batch overhead {report['overhead_seconds']:.2f} s")
    print("batch cost (units -> seconds): " + ", ".join(f"{x:g} -> {y:.2f}" for x, y in report["cost"]["points"]))
    print("final aggregation (partials -> seconds): "
          + ", ".join(f"{x:g} -> {y:.2f}" for x, y in report["final_agg"]["points"]))
    print(f"stored in {open_store(state_dir).cost_history_location}; plot {report['plot']}")
    return 0
