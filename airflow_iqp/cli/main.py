"""Entry point of the ``airflow-iqp`` console script.

Every subcommand is a module in this package with two functions:
``add_parser(subparsers)`` registers its arguments and ``run(args) -> int`` does the
work. Modules are imported only to build the parser, so keep heavy imports (Spark,
Airflow, OR-Tools, matplotlib) inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from airflow_iqp.errors import ConfigError

# Order is the order of ``airflow-iqp --help``.
COMMANDS = ["dev", "plan", "simulate", "explain", "tpch", "replay", "run_window", "connect_server", "calibrate"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-iqp",
        description="Deadline-aware intermittent query processing: plan, run and measure batches.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"airflow_iqp.cli.{name}")
        p = module.add_parser(sub)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"airflow-iqp {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
