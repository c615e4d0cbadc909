"""A real landing directory of CSV file units and a plan entry that waits on it, for the wait tests."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from airflow_iqp.streams import Stream
from airflow_iqp.window.batch import Batch
from tests.support.batches import make_batch


def file_batch(tmp_path: Path, **fields) -> Batch:
    """A batch of a window whose units are ``*.csv`` files in ``tmp_path/landing``.

    By default it is batch 1 of 2, waiting for 2 units, with its latest start a minute
    away and its deadline two minutes away; ``fields`` override.
    """
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    now = time.time()
    stream = Stream(name="events", path=str(landing), format="csv")
    base = dict(query="q", window_id="w1", index=1, of=2, units=2, cumulative=2, expected_total=4, last=False,
                ready_ts=now + 30, latest_start_ts=now + 60, deadline_ts=now + 120, landing=str(landing),
                state_dir=str(tmp_path / "state"), streams=(stream.to_dict(),), label="batch 1/2")
    return make_batch(**{**base, **fields})


def land(batch: Batch, *numbers: int) -> None:
    """Publish file units as a writer that renames into place does."""
    landing = Path(batch.landing)
    for n in numbers:
        tmp = landing / f".{n:06d}.csv.tmp"
        tmp.write_text("id\n1\n")
        tmp.rename(landing / f"{n:06d}.csv")


def land_later(units: list[Path], landing: Path, every: float = 0.7) -> threading.Thread:
    """Publish unit directories into ``landing`` from a thread, one each ``every`` seconds,
    each copied under a hidden name and renamed into place; the thread, started."""
    def publish():
        for u in units:
            time.sleep(every)
            shutil.copytree(u, landing / f".{u.name}")
            (landing / f".{u.name}").rename(landing / u.name)

    lander = threading.Thread(target=publish)
    lander.start()
    return lander
