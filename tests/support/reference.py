"""Reference results for correctness tests: the standard query text run by DuckDB.

Shared by the Spark-side tests and the end-to-end tests, so every result is checked
against the same independent reference.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path

from tests.support.reference_sql import REFERENCE_SQL


def duckdb_reference(qid: str, unit_dirs, static_dir) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of the standard query text run by DuckDB over the same parquet files."""
    import duckdb

    con = duckdb.connect()
    for stream in ("orders", "lineitem"):
        files = [str(Path(u) / f"{stream}.parquet") for u in unit_dirs]
        if files:
            con.execute(f"CREATE VIEW {stream} AS SELECT * FROM read_parquet({files!r})")
        else:  # an empty window: same columns, no rows
            sample = next(Path(static_dir).parent.glob(f"units/*/{stream}.parquet"))
            con.execute(f"CREATE VIEW {stream} AS SELECT * FROM read_parquet('{sample}') LIMIT 0")
    for table in ("customer", "nation", "region", "part", "partsupp", "supplier"):
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{Path(static_dir) / (table + '.parquet')}')")
    cur = con.execute(REFERENCE_SQL[qid])
    cols = [d[0] for d in cur.description]
    rows = [tuple(r) for r in cur.fetchall()]
    con.close()
    return cols, rows


def read_parquet_dir(uri: str):
    """A parquet directory, local or in an object store (``s3a://``), as an Arrow table."""
    import pyarrow.parquet as pq

    from airflow_iqp.paths import is_local, local_path
    from airflow_iqp.store.objects import fs_and_path

    if is_local(uri):
        return pq.read_table(local_path(uri))
    fs, path = fs_and_path(uri)
    return pq.read_table(path, filesystem=fs)


def _norm(v):
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    return v


def _sort_key(row):
    return tuple((v is None, "" if v is None else (v if isinstance(v, str) else f"{float(v):030.6f}"))
                 for v in row)


def _half_ulp(v) -> float:
    """Half a unit in the last place of a DECIMAL result (Spark rounds AVG of a DECIMAL(p, s)
    to s + 4 places, where DuckDB returns a double); 0 for other values."""
    return 0.5 * 10.0 ** v.as_tuple().exponent if isinstance(v, Decimal) and v.is_finite() else 0.0


def assert_same_rows(got: list[tuple], want: list[tuple], ordered: bool, label: str = "") -> None:
    """Row for row; numbers within 1e-9 relative (or half a unit in the last place of a
    DECIMAL result); order checked only when the query defines it."""
    got = [tuple((_norm(v), _half_ulp(v)) for v in r) for r in got]
    want = [tuple(_norm(v) for v in r) for r in want]
    assert len(got) == len(want), f"{label}: {len(got)} rows, reference has {len(want)}"
    if not ordered:
        got = sorted(got, key=lambda r: _sort_key([v for v, _ in r]))
        want = sorted(want, key=_sort_key)
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"{label} row {i}: {g} vs {w}"
        for j, ((a, ulp), b) in enumerate(zip(g, w)):
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=max(1e-12, ulp)), f"{label} row {i} col {j}: {a} != {b}"
            else:
                assert a == b, f"{label} row {i} col {j}: {a!r} != {b!r}"
