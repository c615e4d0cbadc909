"""``airflow-iqp replay``: publish generated units into a landing directory over time, atomically."""

from __future__ import annotations

import json
import sys

from airflow_iqp.errors import ConfigError


def add_parser(subparsers):
    p = subparsers.add_parser("replay", help="publish units into a landing directory at a rate or profile",
                              description=__doc__)
    p.add_argument("--from", dest="source", required=True, help="generated data dir (with units/) or a landing dir")
    p.add_argument("--to", dest="landing", required=True, help="landing directory to publish into")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--rate", type=float, help="fixed rate in units per second")
    how.add_argument("--profile", help="arrival profile: fixed, faster, bursty, slower, late, stalled")
    p.add_argument("--profile-rate", type=float, default=1.0,
                   help="reference rate (units/s) of --profile (default 1, as in the paper)")
    p.add_argument("--window", type=float, help="window length in seconds (default units / rate)")
    p.add_argument("--speedup", type=float, default=1.0, help="divide every arrival offset by X")
    p.add_argument("--json", action="store_true", help="print the publication log as JSON at the end")
    return p


def run(args) -> int:
    from airflow_iqp.inputs.profiles import arrival_offsets
    from airflow_iqp.inputs.replay import replay, source_units

    if args.speedup is None or not args.speedup > 0:
        raise ConfigError(f"must be > 0, got {args.speedup}", field="speedup")
    n = len(source_units(args.source))
    profile, rate = ("fixed", args.rate) if args.rate is not None else (args.profile, args.profile_rate)
    offsets = arrival_offsets(profile, rate, n, args.window)

    def say(i, path, at):
        if not args.json:
            print(f"{at:9.2f}s unit {path.name}", flush=True)

    window = args.window if args.window is not None else n / rate  # the profiles' default window
    log = replay(args.source, args.landing, offsets, speedup=args.speedup, window=window, on_publish=say)
    if args.json:
        json.dump({"profile": profile, "rate": rate, "speedup": args.speedup, "units": log}, sys.stdout)
        print()
    return 0
