"""A generated event stream that is not TPC-H, for the tests of users' own SQL.

``events``: one parquet file per unit, with a timestamp, nullable string, integer and
double columns, and ``cat_id``, a key into the static ``categories`` table. Some events'
keys are not in ``categories`` and some categories have no event: joins have unmatched
keys on both sides. ``users``, a second static table keyed by ``user_id``, has unmatched
keys both ways too, a NULL key and a key twice. DuckDB over the same files is the reference.
"""

from __future__ import annotations

import csv
import datetime as dt
import random
import uuid
from pathlib import Path

EVENT_COLUMNS = {"ts": "TIMESTAMP", "user_id": "BIGINT", "country": "STRING", "amount": "DOUBLE", "qty": "INT",
                 "cat_id": "INT"}

#: The static tables beside the events, and their columns.
STATIC = {"categories": {"cat_id": "INT", "cat_name": "STRING", "weight": "DOUBLE"},
          "users": {"user_id": "BIGINT", "name": "STRING", "tier": "INT"}}


def generate_events(out: Path, units: int = 6, rows: int = 40, seed: int = 7) -> Path:
    """``out/events/part-NNN.parquet`` (one per unit), ``out/categories.parquet`` and ``out/users.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    (out / "events").mkdir(parents=True, exist_ok=True)
    start = dt.datetime(2026, 1, 1)
    for u in range(units):
        n = rows + rng.randint(-rows // 4, rows // 4)
        table = pa.table({
            "ts": pa.array([start + dt.timedelta(seconds=rng.randint(0, 3599)) for _ in range(n)], pa.timestamp("us")),
            "user_id": pa.array([rng.choice([None, *range(1, 12)]) for _ in range(n)], pa.int64()),
            "country": pa.array([rng.choice([None, "fr", "de", "us", "jp"]) for _ in range(n)], pa.string()),
            "amount": pa.array([rng.choice([None, round(rng.uniform(-20, 500), 3), 1e6 + rng.random()])
                                for _ in range(n)], pa.float64()),
            "qty": pa.array([rng.choice([None, *range(0, 10)]) for _ in range(n)], pa.int32()),
            "cat_id": pa.array([rng.choice([None, *range(0, 7)]) for _ in range(n)], pa.int32()),
        })
        pq.write_table(table, out / "events" / f"part-{u:03d}.parquet")
    pq.write_table(pa.table({"cat_id": pa.array([1, 2, 3, 4, 5, 9], pa.int32()),
                             "cat_name": pa.array(["books", "games", None, "food", "books", "void"], pa.string()),
                             "weight": pa.array([1.0, 2.5, 0.5, None, 4.0, 9.0], pa.float64())}),
                   out / "categories.parquet")
    pq.write_table(pa.table({"user_id": pa.array([0, 1, 2, 3, 5, 5, 8, 11, 13, None], pa.int64()),
                             "name": pa.array(["ann", "bob", None, "cy", "dee", "dee2", "eve", "fay", "gus", "hal"]),
                             "tier": pa.array([1, 2, 1, None, 3, 2, 1, 3, 2, 1], pa.int32())}),
                   out / "users.parquet")
    return out


def duckdb_events(sql: str, data: Path, units: list[Path] | None = None) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of ``sql`` run by DuckDB over the events (all, or ``units``) and the static tables."""
    import duckdb

    files = [str(u) for u in units] if units is not None else sorted(str(p) for p in (data / "events").glob("*.parquet"))
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet({files!r})")
    for static in STATIC:
        con.execute(f"CREATE VIEW {static} AS SELECT * FROM read_parquet('{data / (static + '.parquet')}')")
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    rows = [tuple(r) for r in cur.fetchall()]
    con.close()
    return cols, rows


def write_csv_file(landing: Path, rng: random.Random) -> str:
    """One CSV file of events (``user_id``, ``country``, ``amount``, ``qty``; empty values are
    NULLs) as a writer makes it: an in-flight name, a rename, a checksum beside it. Its name."""
    name = f"part-{rng.randint(0, 99999):05d}-{uuid.UUID(int=rng.getrandbits(128))}.csv"
    tmp = landing / f".{name}.inprogress"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["user_id", "country", "amount", "qty"])
        for _ in range(rng.randint(5, 30)):
            w.writerow([rng.choice(["", *map(str, range(1, 9))]), rng.choice(["fr", "de", "us", "jp"]),
                        rng.choice(["", f"{rng.uniform(0, 300):.2f}"]), rng.randint(0, 9)])
    tmp.rename(landing / name)
    (landing / f".{name}.crc").write_text("crc")
    return name
