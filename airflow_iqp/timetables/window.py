"""WindowTimetable: one DAG run per query window, created when the window opens.

A recurring query reads the input that arrives in a window ``[start, end)`` and must
deliver its result by ``end + deadline_offset``. Its batches run *during* the window, so
the run must exist from the window's start, not after its end as with Airflow's interval
timetables (``DagRunInfo.interval`` sets ``run_after = end``). Here:

* ``data_interval`` = the window ``[start, end)``;
* ``run_after`` = ``start`` (the scheduler creates the run as the window opens);
* ``logical_date`` = ``start`` (Airflow derives it from ``data_interval.start``);
* the deadline is ``end + deadline_offset`` (:meth:`WindowTimetable.deadline_for`).

Windows are fixed durations laid end to end from ``anchor`` (UTC arithmetic, no DST
shifts), so a window boundary never depends on when a run was created: scheduled runs,
manual runs with a logical date and ``airflow backfill create`` all get the same
windows.

Register through the plugin (``IQPPlugin.timetables``): Airflow 3.3 serializes a custom
timetable by its qualified class name and the scheduler looks that name up among
plugin-registered timetables (``airflow.serialization.helpers.find_registered_custom_timetable``).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pendulum
from pendulum import DateTime

from airflow.exceptions import AirflowTimetableInvalid
from airflow.timetables.base import DagRunInfo, DataInterval, Timetable, TimeRestriction

_EPOCH = pendulum.datetime(1970, 1, 1, tz="UTC")


def _utc(value: datetime) -> DateTime:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} must be timezone-aware")
    return pendulum.instance(value).in_timezone("UTC")


def _now() -> DateTime:
    """Current time (a function so tests can pin it)."""
    return pendulum.now("UTC")


def _fmt_td(td: timedelta) -> str:
    seconds = int(td.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{td.total_seconds():g}s"


class WindowTimetable(Timetable):
    """One run per fixed window; the run opens with the window and carries a deadline.

    :param window: length of each window (> 0).
    :param deadline_offset: the result is due this long after the window's end (>= 0).
    :param anchor: any window boundary (timezone-aware); windows are
        ``anchor + k * window`` for integer ``k``. Defaults to 1970-01-01T00:00Z, so a
        1-day window runs from midnight UTC to midnight UTC.
    """

    periodic = True
    can_be_scheduled = True
    run_ordering = ("data_interval_end", "logical_date")

    def __init__(self, window: timedelta, deadline_offset: timedelta = timedelta(0), anchor: datetime | None = None):
        self.window = window
        self.deadline_offset = deadline_offset
        self.anchor = _utc(anchor) if anchor is not None else _EPOCH

    # ----------------------------------------------------------------- windows
    def window_start_at_or_before(self, moment: datetime) -> DateTime:
        """Start of the window that contains ``moment``."""
        k = math.floor((_utc(moment) - self.anchor).total_seconds() / self.window.total_seconds())
        return self.anchor + self.window * k

    def window_start_at_or_after(self, moment: datetime) -> DateTime:
        """The first window start that is not before ``moment``."""
        start = self.window_start_at_or_before(moment)
        return start if start == _utc(moment) else start + self.window

    def window_of(self, moment: datetime) -> DataInterval:
        start = self.window_start_at_or_before(moment)
        return DataInterval(start=start, end=start + self.window)

    def deadline_for(self, data_interval: DataInterval) -> DateTime:
        """When the result of the run over ``data_interval`` is due."""
        return _utc(data_interval.end) + self.deadline_offset

    def _info(self, start: DateTime) -> DagRunInfo:
        return DagRunInfo(run_after=start, data_interval=DataInterval(start=start, end=start + self.window))

    # ----------------------------------------------------------------- Timetable API
    def validate(self) -> None:
        if self.window.total_seconds() <= 0:
            raise AirflowTimetableInvalid(f"window must be positive, got {self.window!r}")
        if self.deadline_offset.total_seconds() < 0:
            raise AirflowTimetableInvalid(f"deadline_offset must not be negative, got {self.deadline_offset!r}")

    @property
    def summary(self) -> str:
        return f"window {_fmt_td(self.window)}, deadline +{_fmt_td(self.deadline_offset)}"

    @property
    def description(self) -> str:  # type: ignore[override]
        return (
            f"One run per {_fmt_td(self.window)} window aligned to {self.anchor.isoformat()}, created when the "
            f"window opens; the result is due {_fmt_td(self.deadline_offset)} after the window ends."
        )

    def serialize(self) -> dict[str, Any]:
        return {
            "window": self.window.total_seconds(),
            "deadline_offset": self.deadline_offset.total_seconds(),
            "anchor": self.anchor.isoformat(),
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> WindowTimetable:
        return cls(
            window=timedelta(seconds=data["window"]),
            deadline_offset=timedelta(seconds=data["deadline_offset"]),
            anchor=pendulum.parse(data["anchor"]),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WindowTimetable):
            return NotImplemented
        return self.serialize() == other.serialize()

    def __hash__(self) -> int:
        return hash(tuple(self.serialize().items()))

    def __repr__(self) -> str:
        return f"WindowTimetable(window={self.window!r}, deadline_offset={self.deadline_offset!r}, anchor={self.anchor.isoformat()!r})"

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        """The window containing ``run_after`` (for manual runs, this is the logical date given)."""
        return self.window_of(run_after)

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        if restriction.earliest is None:  # no start_date: nothing to schedule automatically
            return None
        if last_automated_data_interval is not None:
            start = self.window_start_at_or_after(last_automated_data_interval.end)
        else:
            start = self.window_start_at_or_after(restriction.earliest)
        if not restriction.catchup:
            # Skip windows that have already closed, but still run the window that is open now.
            start = max(start, self.window_start_at_or_before(_now()))
        start = max(start, self.window_start_at_or_after(restriction.earliest))
        if restriction.latest is not None and start > restriction.latest:
            return None
        return self._info(start)
