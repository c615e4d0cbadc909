"""Publish generated units into a landing directory over time, one atomic rename per unit."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable

from airflow_iqp.errors import ConfigError
from airflow_iqp.inputs.tpch import streams_at
from airflow_iqp.landing import list_units


def source_units(source: str | os.PathLike) -> list[Path]:
    """The units of a generated data directory (``DIR/units``) or of a landing directory."""
    source = Path(source)
    if not source.is_dir():
        raise ConfigError(f"{source} is not a directory", field="from")
    units = list_units(source / "units" if (source / "units").is_dir() else source, streams_at(source))
    if not units:
        raise ConfigError(f"{source} holds no complete units (expected units/<i>/orders.parquet and lineitem.parquet)",
                          field="from")
    return units


def publish_unit(unit_dir: str | os.PathLike, landing: str | os.PathLike) -> Path:
    """Copy one unit into ``landing`` atomically: hidden temp dir, then rename into place."""
    unit_dir, landing = Path(unit_dir), Path(landing)
    landing.mkdir(parents=True, exist_ok=True)
    final = landing / unit_dir.name
    if final.exists():
        raise ConfigError(f"{final} already exists; replay into an empty landing directory", field="to")
    tmp = landing / f".{unit_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in ("orders.parquet", "lineitem.parquet"):
        shutil.copyfile(unit_dir / f, tmp / f)
    os.rename(tmp, final)
    return final


#: A unit due exactly at the window's end is published this much before it: its copy and
#: rename take a moment, and a unit that lands after the end belongs to the next window in a
#: flat landing directory (its last-modified time says which window it arrived in).
END_MARGIN_S = 0.25


def replay(source: str | os.PathLike, landing: str | os.PathLike, offsets: list[float], *, speedup: float = 1.0,
           window: float | None = None, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep,
           on_publish: Callable[[int, Path, float], None] | None = None) -> list[dict]:
    """Publish the source's units into ``landing``, unit i at ``offsets[i] / speedup`` seconds.

    With ``window`` (seconds, before the speedup), a unit due in the window's last
    :data:`END_MARGIN_S` is published that much before its end; units due after the end (a
    late profile's) are published when due.

    Returns one record per unit: ``{"unit", "planned", "published"}`` (seconds since start).
    """
    if not speedup > 0:
        raise ConfigError(f"must be > 0, got {speedup}", field="speedup")
    if window is not None:
        offsets = [min(off, window - END_MARGIN_S * speedup) if off <= window else off for off in offsets]
    units = source_units(source)
    if len(offsets) != len(units):
        raise ConfigError(f"{len(offsets)} arrival offsets for {len(units)} units", field="profile")
    t0 = clock()
    log = []
    for i, (unit, off) in enumerate(zip(units, offsets)):
        due = off / speedup
        wait = due - (clock() - t0)
        if wait > 0:
            sleep(wait)
        final = publish_unit(unit, landing)
        at = clock() - t0
        log.append({"unit": final.name, "planned": due, "published": at})
        if on_publish:
            on_publish(i, final, at)
    return log
