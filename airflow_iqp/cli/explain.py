"""``airflow-iqp explain``: how a query is split into its per-batch step and its final step.

A query of several aggregations shows each one (its per-batch step and its merge), which
of them share a scan of the batch's rows, the batch's one job that runs them all, and the
final step over their merged rows.

Without ``--stream`` it checks the syntax and whether the query splits; with the streams
(and ``--static`` tables) it also checks every table and column against their files, reads
each table's format from its files unless ``--format`` says it, and shows the types Spark
gives the partial and result columns. A query that cannot be split exits 2 with one line
that says why.
"""

from __future__ import annotations

import json

from airflow_iqp.cli.query_args import add_query_args, read_query_args


def add_parser(subparsers):
    p = subparsers.add_parser("explain", help="show how a SQL query is split into per-batch and final steps",
                              description=__doc__)
    add_query_args(p, required=True)
    p.add_argument("--json", action="store_true", help="print the split as JSON")
    return p


def _columns(types: dict, names) -> str:
    return ", ".join(f"{n} {types[n]}" if types.get(n) else n for n in names)


def run(args) -> int:
    from airflow_iqp.query.model import show_types
    from airflow_iqp.query.split import step_types

    saved, schemas = read_query_args(args, check_files=True)
    q = saved.query
    partial, result = step_types(q, schemas) if schemas else ({}, {})
    if args.json:
        out = {k: v for k, v in q.to_dict().items() if k != "kind"}
        print(json.dumps(out | {"formats": {s.name: s.format for s in saved.streams},
                                "partial_types": partial, "types": result}))
        return 0
    streams = ", ".join(f"{s.name} ({s.format} files in {s.path})" for s in saved.streams) or ", ".join(q.streams)
    print((f"query {q.id}: " if args.name else "") + f"streams {streams}; static tables {', '.join(q.static) or 'none'}")
    if q.single_batch:
        print("cannot be split: runs as one batch after the window's end (--allow-single-batch)")
    if q.aggregations:
        _print_aggregations(q, partial)
        print(f"\nper batch, in one job (over each batch's units, into one partial):\n  {q.partial_sql}")
    else:
        print(f"\nper batch (over each batch's units):\n  {q.partial_sql}")
        if any(partial.values()):
            print(f"  partial columns: {_columns(partial, partial)}")
        print(f"\nfinal, merge (over {{partials}}, the union of every batch's partial):\n  "
              f"{show_types(q.merge_sql, partial)}")
    reads = ", ".join(f"{{{t}}}" for t in (*q.merged_names, *q.final_static))
    reads = " and ".join(reads.rsplit(", ", 1))
    print(f"\nfinal, result (over {reads}):\n  {q.finish_sql}")
    print(f"\ncolumns: {_columns(result, q.columns)}" + ("  (ordered)" if q.ordered else ""))
    return 0


def _print_aggregations(q, partial: dict) -> None:
    """Each aggregation's per-batch step and merge, and the scans of the batch's rows they share."""
    from airflow_iqp.query.model import show_types

    print(f"\n{len(q.aggregations)} aggregations, each batch's in one job; scans of the batch's rows:")
    scans: dict[int, list[int]] = {}
    for i, agg in enumerate(q.aggregations):
        scans.setdefault(agg.scan, []).append(i)
    for members in scans.values():
        streams = ", ".join(dict.fromkeys(s for i in members for s in q.aggregations[i].streams))
        if len(members) > 1:
            print(f"  aggregations {', '.join(map(str, members))} share one scan of {streams}")
        else:
            print(f"  aggregation {members[0]} reads {streams} in a scan of its own")
    for i, (agg, merge, name) in enumerate(zip(q.aggregations, q.merges, q.merged_names)):
        print(f"\naggregation {i}, over {', '.join(agg.streams)}:\n  per batch: {agg.partial_sql}")
        mine = {c: t for c, t in partial.items() if c.startswith(f"_{i}_")}
        if any(mine.values()):
            print(f"  partial columns: {_columns(mine, mine)}")
        print(f"  merge into {{{name}}}: {show_types(merge, partial)}")
