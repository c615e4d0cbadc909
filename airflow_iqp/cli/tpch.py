"""``airflow-iqp tpch``: generate TPC-H with tpchgen-cli, the streams cut into arrival units."""

from __future__ import annotations

import json


def add_parser(subparsers):
    p = subparsers.add_parser("tpch", help="generate TPC-H data: stream units + static tables",
                              description=__doc__)
    p.add_argument("--scale", type=float, required=True, help="TPC-H scale factor (e.g. 0.01)")
    p.add_argument("--files", type=int, required=True, help="number of arrival units N")
    p.add_argument("--out", required=True, help="output directory (units/ and static/ are written in it)")
    p.add_argument("--window-seconds", type=float, help="window length for the event-time column (default N)")
    p.add_argument("--window-start", default=None, help="ISO timestamp of the window start")
    p.add_argument("--overwrite", action="store_true", help="replace units/ and static/ in a non-empty --out")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    return p


def run(args) -> int:
    from airflow_iqp.inputs.tpch import DEFAULT_WINDOW_START, generate

    info = generate(args.scale, args.files, args.out, window_seconds=args.window_seconds,
                    window_start=args.window_start or DEFAULT_WINDOW_START, overwrite=args.overwrite)
    if args.json:
        print(json.dumps({k: v for k, v in info.items() if k != "units"} | {"out": args.out}))
    else:
        print(f"wrote {info['files']} units ({info['orders']} orders, {info['lineitem']} lineitems) "
              f"and static tables to {args.out}")
    return 0
