"""Which listing errors a wait rides out (is_transient), and the listing cache the waits share."""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.store import ClaimError, open_store
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.streams import Stream
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.listing import ListingCache, is_transient


def raised(action) -> BaseException:
    """The exception that ``action()`` really raises."""
    with pytest.raises(BaseException) as info:
        action()
    return info.value


def io_error(code: int) -> OSError:
    """An I/O error as the kernel reports it (ESTALE, EIO, ETIMEDOUT cannot be made on a local disk)."""
    return OSError(code, os.strerror(code), "/mnt/shared/landing")


# ------------------------------------------------------------------ transient


@pytest.mark.parametrize("code", [errno.ESTALE, errno.EIO, errno.ETIMEDOUT, errno.EAGAIN, errno.ENOTCONN])
def test_a_shared_filesystems_blip_is_transient(code):
    assert is_transient(io_error(code))


def test_a_landing_directory_gone_for_a_moment_is_transient(tmp_path):
    assert is_transient(raised(lambda: os.listdir(tmp_path / "gone")))


def test_timeouts_and_dropped_connections_are_transient():
    assert is_transient(TimeoutError(errno.ETIMEDOUT, "timed out"))
    assert is_transient(ConnectionResetError(errno.ECONNRESET, "reset by peer"))


def test_an_object_store_error_without_errno_is_transient():
    assert is_transient(OSError("SlowDown: please reduce your request rate"))


# ------------------------------------------------------------------ permanent


def test_a_permission_error_is_permanent(tmp_path):
    if os.geteuid() == 0:  # root reads whatever the mode: the error as the kernel would raise it
        exc = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path))
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        exc = raised(lambda: os.listdir(locked))
    assert isinstance(exc, PermissionError) and not is_transient(exc)


def test_a_configuration_error_is_permanent():
    assert not is_transient(raised(lambda: Stream(name="events", format="xls")))


def test_a_bad_plan_entry_is_permanent():
    assert not is_transient(raised(lambda: Batch.from_dict({"index": 1})))


def test_a_claim_clash_and_bad_data_are_permanent(tmp_path):
    ws = open_store(tmp_path).window("q", "w")
    ws.claim(1, ["000001"], [])
    clash = raised(lambda: ws.claim(2, ["000001"], []))
    assert isinstance(clash, ClaimError) and not is_transient(clash)
    assert not is_transient(DataError("000001.csv: not a CSV file"))


def test_a_landing_path_that_is_no_directory_is_permanent(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert not is_transient(raised(lambda: os.listdir(tmp_path / "file")))  # ENOTDIR
    assert not is_transient(raised(lambda: os.listdir(tmp_path / "loop")))  # ELOOP


def test_a_bug_is_permanent():
    assert not is_transient(raised(lambda: json.loads("{")))
    assert not is_transient(raised(lambda: {}["key"]))


# ------------------------------------------------------------------ the cache


def counting(fn):
    def wrapper(*args):
        wrapper.calls += 1
        return fn(*args)

    wrapper.calls = 0
    return wrapper


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_listing_is_reused_while_fresh_then_made_again(tmp_path):
    (tmp_path / "000001.csv").write_text("id\n1\n")
    clock, count = Clock(), counting(count_names)
    cache = ListingCache(count_names=count, clock=clock)
    assert cache.count(tmp_path, 1.0) == 1
    (tmp_path / "000002.csv").write_text("id\n2\n")
    clock.now += 0.5
    assert cache.count(tmp_path, 1.0) == 1 and count.calls == 1  # fresh: reused
    assert cache.count(tmp_path, 0.2) == 2 and count.calls == 2  # too old for this caller
    assert (cache.listings, cache.hits) == (2, 1)


def test_units_are_kept_per_landing_directory_and_streams(tmp_path):
    (tmp_path / "000001.csv").write_text("id\n1\n")
    (tmp_path / "000002.json").write_text("{}\n")
    units = counting(list_units)
    cache = ListingCache(list_units=units, clock=Clock())
    csv, js = (Stream(name="e", format="csv"),), (Stream(name="e", format="json"),)
    assert [u.name for u in cache.units(tmp_path, csv, 1.0)] == ["000001.csv"]
    assert [u.name for u in cache.units(tmp_path, js, 1.0)] == ["000002.json"]
    assert [u.name for u in cache.units(str(tmp_path), csv, 1.0)] == ["000001.csv"]
    assert units.calls == 2


def test_a_failed_listing_is_kept_as_long_as_a_good_one(tmp_path):
    clock = Clock()

    def stale(landing):
        stale.calls += 1
        raise io_error(errno.ESTALE)

    stale.calls = 0
    cache = ListingCache(count_names=stale, clock=clock)
    first = raised(lambda: cache.count(tmp_path, 1.0))
    second = raised(lambda: cache.count(tmp_path, 1.0))
    assert stale.calls == 1 and first.errno == second.errno == errno.ESTALE and first is not second
    clock.now += 2
    raised(lambda: cache.count(tmp_path, 1.0))
    assert stale.calls == 2


def test_callers_that_arrive_during_a_listing_wait_for_it(tmp_path):
    started, release = threading.Event(), threading.Event()

    def slow(landing):
        slow.calls += 1
        started.set()
        release.wait(5)
        return 7

    slow.calls = 0
    cache = ListingCache(count_names=slow)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.count(tmp_path, 10.0))) for _ in range(6)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(5)
    assert got == [7] * 6 and slow.calls == 1


def test_old_entries_are_dropped(tmp_path):
    clock, count = Clock(), counting(lambda landing: 0)
    cache = ListingCache(count_names=count, clock=clock)
    cache.count(tmp_path / "a", 1e9)
    clock.now += ListingCache.KEEP_S + 1
    cache.count(tmp_path / "b", 1e9)  # a listing of another directory clears out the old ones
    cache.count(tmp_path / "a", 1e9)  # so this one lists again, however fresh it would be
    assert count.calls == 3


def test_configuration_errors_pass_through_unchanged(tmp_path):
    def bad(landing):
        raise ConfigError("landing must be a directory", "streams.events.path")

    with pytest.raises(ConfigError, match="streams.events.path: landing must be a directory"):
        ListingCache(count_names=bad).count(tmp_path, 1.0)
