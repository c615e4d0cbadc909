"""WindowTimetable: windows, run creation at the window start, manual/backfill alignment."""

from __future__ import annotations

import json
from datetime import timedelta

import pendulum
import pytest
from airflow.exceptions import AirflowTimetableInvalid
from airflow.timetables.base import DataInterval, TimeRestriction

from airflow_iqp.timetables import window as window_mod
from airflow_iqp.timetables.window import WindowTimetable

SIX_H = timedelta(hours=6)
OFFSET = timedelta(minutes=30)


def dt(*args):
    return pendulum.datetime(*args, tz="UTC")


def tt(**kw):
    kw.setdefault("window", SIX_H)
    kw.setdefault("deadline_offset", OFFSET)
    return WindowTimetable(**kw)


@pytest.fixture
def now_at(monkeypatch):
    def pin(moment):
        monkeypatch.setattr(window_mod, "_now", lambda: moment)

    return pin


def test_serialize_round_trip_through_airflow_encoder():
    from airflow.serialization.decoders import decode_timetable
    from airflow.serialization.encoders import encode_timetable

    original = tt(anchor=dt(2024, 1, 1, 3))
    encoded = encode_timetable(original)  # raises unless a plugin registers the class
    assert encoded["__type"] == "airflow_iqp.timetables.window.WindowTimetable"
    json.dumps(encoded)
    back = decode_timetable(json.loads(json.dumps(encoded)))
    assert isinstance(back, WindowTimetable) and back == original
    assert back.serialize() == {"window": 21600.0, "deadline_offset": 1800.0, "anchor": "2024-01-01T03:00:00+00:00"}


def test_run_is_created_at_window_start_with_window_as_data_interval():
    info = tt().next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=dt(2024, 3, 1), latest=None, catchup=True),
    )
    assert info.data_interval == DataInterval(dt(2024, 3, 1, 0), dt(2024, 3, 1, 6))
    assert info.run_after == dt(2024, 3, 1, 0)  # created when the window opens, not after it
    assert info.logical_date == dt(2024, 3, 1, 0)
    assert tt().deadline_for(info.data_interval) == dt(2024, 3, 1, 6, 30)


def test_windows_follow_each_other_and_align_to_anchor():
    t = tt(anchor=dt(2000, 1, 1, 2))  # windows at 02, 08, 14, 20
    r = TimeRestriction(earliest=dt(2024, 3, 1, 9, 15), latest=None, catchup=True)
    first = t.next_dagrun_info(last_automated_data_interval=None, restriction=r)
    assert first.data_interval.start == dt(2024, 3, 1, 14)  # first window starting at/after start_date
    second = t.next_dagrun_info(last_automated_data_interval=first.data_interval, restriction=r)
    assert second.data_interval == DataInterval(dt(2024, 3, 1, 20), dt(2024, 3, 2, 2))
    # A misaligned last interval (e.g. from an older timetable version) snaps to the grid.
    odd = DataInterval(dt(2024, 3, 1, 9), dt(2024, 3, 1, 15))
    assert t.next_dagrun_info(last_automated_data_interval=odd, restriction=r).data_interval.start == dt(2024, 3, 1, 20)


def test_catchup_false_runs_the_open_window_and_skips_closed_ones(now_at):
    now_at(dt(2024, 3, 5, 13, 0))
    r = TimeRestriction(earliest=dt(2024, 3, 1), latest=None, catchup=False)
    info = tt().next_dagrun_info(last_automated_data_interval=DataInterval(dt(2024, 3, 1), dt(2024, 3, 1, 6)), restriction=r)
    assert info.data_interval == DataInterval(dt(2024, 3, 5, 12), dt(2024, 3, 5, 18))
    assert info.run_after == dt(2024, 3, 5, 12)
    first = tt().next_dagrun_info(last_automated_data_interval=None, restriction=r)
    assert first.data_interval.start == dt(2024, 3, 5, 12)


def test_catchup_true_walks_every_window(now_at):
    now_at(dt(2024, 3, 5, 13, 0))
    r = TimeRestriction(earliest=dt(2024, 3, 1), latest=None, catchup=True)
    info = tt().next_dagrun_info(last_automated_data_interval=DataInterval(dt(2024, 3, 1), dt(2024, 3, 1, 6)), restriction=r)
    assert info.data_interval.start == dt(2024, 3, 1, 6)


def test_end_date_and_missing_start_date_stop_scheduling():
    t = tt()
    r = TimeRestriction(earliest=dt(2024, 3, 1), latest=dt(2024, 3, 1, 5), catchup=True)
    assert t.next_dagrun_info(last_automated_data_interval=None, restriction=r).data_interval.start == dt(2024, 3, 1)
    assert t.next_dagrun_info(last_automated_data_interval=DataInterval(dt(2024, 3, 1), dt(2024, 3, 1, 6)), restriction=r) is None
    assert t.next_dagrun_info(last_automated_data_interval=None, restriction=TimeRestriction(None, None, True)) is None


def test_manual_runs_get_the_window_containing_the_logical_date():
    t = tt(anchor=dt(2000, 1, 1, 2))
    assert t.infer_manual_data_interval(run_after=dt(2024, 3, 1, 9, 59)) == DataInterval(dt(2024, 3, 1, 8), dt(2024, 3, 1, 14))
    assert t.infer_manual_data_interval(run_after=dt(2024, 3, 1, 8)) == DataInterval(dt(2024, 3, 1, 8), dt(2024, 3, 1, 14))
    # before the anchor works too
    assert t.infer_manual_data_interval(run_after=dt(1999, 12, 31, 23)) == DataInterval(dt(1999, 12, 31, 20), dt(2000, 1, 1, 2))


def test_backfill_iterates_the_same_aligned_windows_as_the_scheduler():
    """``airflow backfill create`` goes through SerializedDAG.iter_dagrun_infos_between."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("tt_backfill", schedule=tt(anchor=dt(2000, 1, 1, 2)), start_date=dt(2024, 1, 1), catchup=False) as dag:
        pass
    sdag = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    infos = list(sdag.iter_dagrun_infos_between(dt(2024, 3, 1, 1), dt(2024, 3, 1, 20)))
    assert [i.data_interval.start for i in infos] == [dt(2024, 3, 1, 2), dt(2024, 3, 1, 8), dt(2024, 3, 1, 14), dt(2024, 3, 1, 20)]
    assert all(i.run_after == i.data_interval.start and i.data_interval.end - i.data_interval.start == SIX_H for i in infos)
    assert isinstance(sdag.timetable, WindowTimetable) and sdag.timetable.deadline_offset == OFFSET


def test_summary_description_and_validation():
    t = tt()
    assert t.summary == "window 6h, deadline +30m"
    assert "6h window" in t.description and "30m after the window ends" in t.description
    with pytest.raises(AirflowTimetableInvalid):
        WindowTimetable(window=timedelta(0)).validate()
    with pytest.raises(AirflowTimetableInvalid):
        WindowTimetable(window=SIX_H, deadline_offset=timedelta(seconds=-1)).validate()
    with pytest.raises(ValueError):
        WindowTimetable(window=SIX_H, anchor=pendulum.naive(2024, 1, 1))


def test_deserialize_inverts_serialize_and_equal_timetables_hash_alike():
    t = tt(anchor=dt(2024, 1, 1, 3))
    back = WindowTimetable.deserialize(json.loads(json.dumps(t.serialize())))
    assert back == t and hash(back) == hash(t) and back != tt()
    assert repr(back) == ("WindowTimetable(window=datetime.timedelta(seconds=21600), "
                          "deadline_offset=datetime.timedelta(seconds=1800), anchor='2024-01-01T03:00:00+00:00')")
    assert (t == object()) is False


def test_windows_are_fixed_durations_in_utc_across_a_dst_change():
    """An anchor in a zone with summer time still gives windows of exactly the window's length."""
    t = WindowTimetable(window=timedelta(days=1), anchor=pendulum.datetime(2024, 3, 1, tz="Europe/Berlin"))
    before, after = t.window_of(dt(2024, 3, 30, 12)), t.window_of(dt(2024, 4, 1, 12))  # DST began 31 March
    assert before.start == dt(2024, 3, 29, 23) and after.start == dt(2024, 3, 31, 23)
    assert (before.end - before.start).total_seconds() == (after.end - after.start).total_seconds() == 86400


def test_a_window_boundary_belongs_to_the_window_it_starts():
    t = tt()
    assert t.window_start_at_or_before(dt(2024, 3, 1, 6)) == dt(2024, 3, 1, 6)
    assert t.window_start_at_or_after(dt(2024, 3, 1, 6)) == dt(2024, 3, 1, 6)
    assert t.window_start_at_or_after(dt(2024, 3, 1, 6, 0, 1)) == dt(2024, 3, 1, 12)
    assert t.window_of(dt(2024, 3, 1, 5, 59, 59)) == DataInterval(dt(2024, 3, 1, 0), dt(2024, 3, 1, 6))


def test_summary_of_windows_that_are_not_whole_minutes():
    assert WindowTimetable(window=timedelta(seconds=90), deadline_offset=timedelta(seconds=2.5)).summary == \
        "window 90s, deadline +2.5s"
    assert WindowTimetable(window=timedelta(days=2)).summary == "window 2d, deadline +0s"
