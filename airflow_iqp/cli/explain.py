"""``airflow-iqp explain``: how a query is split into its per-batch step and its final step.

Without ``--stream`` it checks the syntax and whether the query splits; with the streams
(and ``--static`` tables) it also checks every table and column against their files.
A query that cannot be split exits 2 with one line that says why.
"""

from __future__ import annotations

import json

from airflow_iqp.cli.query_args import add_query_args, saved_from_args


def add_parser(subparsers):
    p = subparsers.add_parser("explain", help="show how a SQL query is split into per-batch and final steps",
                              description=__doc__)
    add_query_args(p, required=True)
    p.add_argument("--json", action="store_true", help="print the split as JSON")
    return p


def run(args) -> int:
    from airflow_iqp.query.model import show_types

    saved = saved_from_args(args, check_files=True)
    q = saved.query
    if args.json:
        print(json.dumps({k: v for k, v in q.to_dict().items() if k != "kind"}))
        return 0
    print(f"query {q.id}: streams {', '.join(q.streams)}; static tables {', '.join(q.static) or 'none'}")
    if q.single_batch:
        print("cannot be split: runs as one batch after the window's end (allow_single_batch)")
    print(f"\nper batch (over each batch's units):\n  {q.partial_sql}")
    print(f"\nfinal, merge (over {{partials}}, the union of every batch's partial):\n  {show_types(q.merge_sql)}")
    print(f"\nfinal, result (over {{merged}}):\n  {q.finish_sql}")
    print(f"\ncolumns: {', '.join(q.columns)}" + ("  (ordered)" if q.ordered else ""))
    return 0
