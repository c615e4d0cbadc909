"""Generate TPC-H with ``tpchgen-cli`` and cut the two streams into arrival units.

Layout written by :func:`generate`::

    OUT/units/<i, zero-padded>/orders.parquet     unit i of the orders stream
    OUT/units/<i, zero-padded>/lineitem.parquet   the lineitems of exactly those orders
    OUT/static/<table>.parquet                    customer, nation, region, part, partsupp, supplier
    OUT/tpch.json                                 what was generated

``OUT/units`` has the same layout as a landing directory, so it can be read directly or
replayed into one over time (``airflow-iqp replay``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.streams import Stream

STREAMS = ("orders", "lineitem")
STATIC_TABLES = ("customer", "nation", "region", "part", "partsupp", "supplier")

# Spark SQL types of the TPC-H columns (as written by tpchgen-cli). Streams also carry an
# event-time column (``o_eventtime`` / ``l_eventtime``) that the queries do not need.
SCHEMAS: dict[str, list[tuple[str, str]]] = {
    "orders": [
        ("o_orderkey", "BIGINT"), ("o_custkey", "BIGINT"), ("o_orderstatus", "STRING"),
        ("o_totalprice", "DECIMAL(15,2)"), ("o_orderdate", "DATE"), ("o_orderpriority", "STRING"),
        ("o_clerk", "STRING"), ("o_shippriority", "INT"), ("o_comment", "STRING"),
    ],
    "lineitem": [
        ("l_orderkey", "BIGINT"), ("l_partkey", "BIGINT"), ("l_suppkey", "BIGINT"),
        ("l_linenumber", "INT"), ("l_quantity", "DECIMAL(15,2)"), ("l_extendedprice", "DECIMAL(15,2)"),
        ("l_discount", "DECIMAL(15,2)"), ("l_tax", "DECIMAL(15,2)"), ("l_returnflag", "STRING"),
        ("l_linestatus", "STRING"), ("l_shipdate", "DATE"), ("l_commitdate", "DATE"),
        ("l_receiptdate", "DATE"), ("l_shipinstruct", "STRING"), ("l_shipmode", "STRING"),
        ("l_comment", "STRING"),
    ],
}
EVENT_TIME = {"orders": "o_eventtime", "lineitem": "l_eventtime"}
DEFAULT_WINDOW_START = "2026-01-01T00:00:00+00:00"


def schema_ddl(stream: str) -> str:
    """The Spark DDL schema string of a stream's TPC-H columns."""
    return ", ".join(f"{c} {t}" for c, t in SCHEMAS[stream])


def streams_at(landing: str | os.PathLike = "") -> tuple[Stream, ...]:
    """The two streams of the layout :func:`generate` writes, landing in ``landing``: each
    unit a directory holding ``orders.parquet`` and ``lineitem.parquet``, of TPC-H's columns.
    The catalogue's queries read these."""
    return tuple(Stream(name, path=str(landing), unit="dir", schema=schema_ddl(name)) for name in STREAMS)


def unit_name(i: int, n_units: int) -> str:
    """Zero-padded unit directory name (at least 6 digits)."""
    return f"{i:0{max(6, len(str(max(n_units - 1, 0))))}d}"


def _tpchgen() -> str:
    exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    if not Path(exe).exists():
        raise ConfigError("tpchgen-cli is not installed (pip install tpchgen-cli)", field="tpchgen-cli")
    return exe


def _plain_strings(table):
    """string_view / large_string -> string, so every reader (Spark, DuckDB) agrees."""
    import pyarrow as pa

    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
            t = pa.string()
        fields.append(pa.field(f.name, t, nullable=f.nullable))
    return table.cast(pa.schema(fields))


def generate(scale: float, files: int, out: str | os.PathLike, *, window_seconds: float | None = None,
             window_start: str = DEFAULT_WINDOW_START, overwrite: bool = False) -> dict:
    """Generate TPC-H at ``scale`` into ``out``, the streams cut into ``files`` units.

    Orders are cut into ``files`` consecutive order-key ranges of (nearly) equal size and
    each unit's lineitems are exactly the lineitems of its orders, so an order and its
    lineitems arrive together. Each stream row gets an event time: unit i's rows are spread
    uniformly over ``[start + i*w/n, start + (i+1)*w/n)`` where ``w`` is the window length
    (default: ``files`` seconds, one unit per second as in the paper).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not scale > 0:
        raise ConfigError(f"must be > 0, got {scale}", field="scale")
    if int(files) != files or files < 1:
        raise ConfigError(f"must be an integer >= 1, got {files}", field="files")
    files = int(files)
    window_seconds = float(files if window_seconds is None else window_seconds)
    if not window_seconds > 0:
        raise ConfigError(f"must be > 0, got {window_seconds}", field="window_seconds")
    try:
        start = datetime.fromisoformat(window_start)
    except ValueError as exc:
        raise ConfigError(f"not an ISO timestamp: {window_start!r}", field="window_start") from exc
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out} exists and is not empty (use --overwrite)", field="out")
        for sub in ("units", "static"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix=".tpchgen-", dir=out) as raw:
        cmd = [_tpchgen(), "parquet", "-s", repr(float(scale)), "-o", raw]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise DataError(f"tpchgen-cli failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        static = out / "static"
        static.mkdir(exist_ok=True)
        for t in STATIC_TABLES:
            pq.write_table(_plain_strings(pq.read_table(Path(raw) / f"{t}.parquet")), static / f"{t}.parquet")

        orders = _plain_strings(pq.read_table(Path(raw) / "orders.parquet"))
        lineitem = _plain_strings(pq.read_table(Path(raw) / "lineitem.parquet"))
        orders = orders.sort_by("o_orderkey")
        lineitem = lineitem.sort_by([("l_orderkey", "ascending"), ("l_linenumber", "ascending")])
        okeys = orders.column("o_orderkey").to_numpy()
        lkeys = lineitem.column("l_orderkey").to_numpy()
        bounds = np.linspace(0, len(okeys), files + 1).round().astype(int)
        units_dir = out / "units"
        units_dir.mkdir(exist_ok=True)
        step = window_seconds / files
        epoch_us = int(start.timestamp() * 1_000_000)
        counts = []
        for i in range(files):
            o = orders.slice(bounds[i], bounds[i + 1] - bounds[i])
            if len(o):
                lo, hi = okeys[bounds[i]], okeys[bounds[i + 1] - 1]
                a, b = np.searchsorted(lkeys, lo, "left"), np.searchsorted(lkeys, hi, "right")
            else:
                a = b = 0
            li = lineitem.slice(a, b - a)
            udir = units_dir / unit_name(i, files)
            tmp = units_dir / f".{udir.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            for name, tbl in (("orders", o), ("lineitem", li)):
                n = len(tbl)
                offs = (i + (np.arange(n) / max(n, 1))) * step
                ts = pa.array(epoch_us + (offs * 1_000_000).astype(np.int64), pa.timestamp("us", tz="UTC"))
                pq.write_table(tbl.append_column(EVENT_TIME[name], ts), tmp / f"{name}.parquet")
            os.rename(tmp, udir)
            counts.append({"unit": udir.name, "orders": len(o), "lineitem": len(li)})
        if sum(c["lineitem"] for c in counts) != len(lineitem):
            raise DataError("lineitem order keys fall outside the orders' key ranges; tpchgen output is inconsistent")

    info = {
        "scale": scale, "files": files, "window_seconds": window_seconds,
        "window_start": start.isoformat(), "window_end": (start + timedelta(seconds=window_seconds)).isoformat(),
        "orders": int(orders.num_rows), "lineitem": int(lineitem.num_rows), "units": counts,
    }
    (out / "tpch.json").write_text(json.dumps(info, indent=2) + "\n")
    return info
