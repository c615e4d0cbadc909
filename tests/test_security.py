"""Security and safety, without Spark: who may reach the Connect server, who may read the state
directory, which names may become paths, and that no connection secret lands in logs or state.

The real token-authenticated server is in ``tests/spark/test_connect_security.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import stat
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_iqp.cli.main import main as cli_main
from airflow_iqp.coordination import cluster_turn
from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import DENIED, check_name, check_within
from airflow_iqp.query import decompose
from airflow_iqp.query.model import Query
from airflow_iqp.filecheck import expected_columns
from airflow_iqp.paths import make_dirs
from airflow_iqp.query.store import Saved, load_query, save_query
from airflow_iqp.spark.batch import batch_work, execute_batch
from airflow_iqp.spark.connect import TOKEN_ENV, client_url, connect_url, redact_url, start_server
from airflow_iqp.spark.steps import static_path
from airflow_iqp.store import batch_name, open_store
from airflow_iqp.store.files import atomic_write_json, replace_dir, temp_sibling
from airflow_iqp.landing import list_units
from airflow_iqp.streams import Stream
from airflow_iqp.window.batch import Batch
from tests.support.batches import TPCH_STREAMS, make_batch
from tests.support.tasks import rewrite_claim

TOKEN = "s3cr3t+token/with=odd&chars-7f2a9c"

# ----------------------------------------------------------------------------- Spark Connect


@pytest.fixture
def no_token_env(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "spark.example.com"])
def test_a_server_beyond_loopback_without_a_token_is_refused_naming_the_variable(host, tmp_path, no_token_env):
    with pytest.raises(ConfigError, match=TOKEN_ENV) as err:
        start_server(free_port(), base=tmp_path, host=host)
    assert err.value.field == "token"
    assert not any(tmp_path.iterdir())  # refused before anything was started or written


def test_the_token_and_the_binding_are_not_taken_from_conf(tmp_path, no_token_env):
    with pytest.raises(ConfigError, match=TOKEN_ENV) as err:  # conf is on the command line: ps shows it
        start_server(free_port(), base=tmp_path, conf={"spark.connect.authenticate.token": TOKEN})
    assert err.value.field == "conf" and TOKEN not in str(err.value)
    with pytest.raises(ConfigError, match="--host") as err:
        start_server(free_port(), base=tmp_path, conf={"spark.connect.grpc.binding.address": "0.0.0.0"})
    assert err.value.field == "conf"


def test_the_cli_refuses_a_public_host_without_a_token(tmp_path, capsys, no_token_env):
    rc = cli_main(["connect-server", "start", "--host", "0.0.0.0", "--port", str(free_port()),
                   "--dir", str(tmp_path)])
    assert rc == 2 and TOKEN_ENV in capsys.readouterr().err


def test_urls_with_a_token_go_to_localhost_and_are_redacted_for_printing(monkeypatch, no_token_env):
    # pyspark sends a token in the clear only to the host named "localhost"; to 127.0.0.1 it opens TLS.
    assert connect_url(15002) == "sc://127.0.0.1:15002"
    url = connect_url(15002, token=TOKEN)
    assert url.startswith("sc://localhost:15002/;token=") and TOKEN not in url  # quoted
    assert TOKEN.split("+")[0] not in redact_url(url) and redact_url(url) == "sc://localhost:15002/;token=***"
    assert connect_url(15002, "spark.example.com", TOKEN).startswith("sc://spark.example.com:15002/;token=")
    assert client_url("sc://127.0.0.1:15002/;token=abc") == "sc://localhost:15002/;token=abc"
    assert client_url("sc://127.0.0.1:15002/") == "sc://127.0.0.1:15002/"
    assert client_url("sc://127.0.0.1:15002/;token=abc;use_ssl=true") == "sc://127.0.0.1:15002/;token=abc;use_ssl=true"
    monkeypatch.setenv(TOKEN_ENV, "x" * 12)  # pyspark's client takes the variable when the URL has no token
    assert client_url("sc://127.0.0.1:15002") == "sc://localhost:15002"


# ----------------------------------------------------------------------------- permissions


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.fixture
def umask():
    """Run with a permissive umask, as a shell or a service often has; restore it afterwards."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _foreign_dir(tmp: Path) -> None:
    """A directory as a writer without our umask conf leaves it: world-readable (its parent made as
    ``write_atomic`` makes it)."""
    make_dirs(tmp.parent)
    tmp.mkdir(mode=0o755)
    (tmp / "part-00000.parquet").write_bytes(b"PAR1")
    (tmp / "part-00000.parquet").chmod(0o644)
    (tmp / "_SUCCESS").touch()


def test_nothing_in_the_state_directory_is_world_readable(tmp_path, umask):
    from airflow_iqp.operators.plan import BatchPlanOperator
    from airflow_iqp.options import Algorithm1, Arrival
    from tests.support.tasks import START, TI, context

    state = tmp_path / "a" / "state"  # its parents are made by the state layer too
    BatchPlanOperator(task_id="plan", query="cq2", landing=str(tmp_path / "landing"), state_dir=str(state),
                      streams=TPCH_STREAMS, per_window=True, deadline_offset=dt.timedelta(seconds=100),
                      arrival=Arrival(units=24, rate=1.0),
                      cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": 0.6, "per_batch": 25},
                                     final_agg_hint={"kind": "linear", "base": 25, "per_batch": 0.5}),
                      ).execute(context(TI("plan"), end=START + dt.timedelta(minutes=4)))
    store = open_store(state)
    [window] = store.query("cq2").windows()
    ws = store.window("cq2", window)
    assert ws.doc("plan") is not None and store.query("cq2").saved() is not None
    ws.note_seen(["000001", "000002"])
    ws.claim(1, ["000001", "000002"], ["/landing/000001/orders.parquet"])
    tmp = temp_sibling(ws.partial_uri(1))  # as a batch job writes its partial
    _foreign_dir(tmp)
    replace_dir(tmp, ws.partial_uri(1))
    atomic_write_json(ws.metrics_uri(1), {"units": 2})
    tmp = temp_sibling(ws.result_uri)
    _foreign_dir(tmp)
    replace_dir(tmp, ws.result_uri)
    ws.write_manifest({"result": ws.result_uri})
    store.record_cost(query="cq2", kind="batch", units=2, batches=1, wall_seconds=1.0)
    batch = make_batch(query="cq2", window_id=ws.window_id, state_dir=str(state))
    with cluster_turn(batch, slots=1):
        pass
    first = tmp_path / "000001.csv"
    first.write_text("k,n\n1,2\n")
    expected_columns(Stream(name="t", format="csv"), str(first), store.query("cq2"))  # the schema record
    modes = _modes(tmp_path / "a")
    for name in ("state/cq2/query.json", f"state/cq2/{ws.window_id}/claims/batch-0001.json",
                 f"state/cq2/{ws.window_id}/partials/batch-0001/part-00000.parquet", "state/_turns/waiting",
                 f"state/cq2/{ws.window_id}/result", "state/cost_history.jsonl", f"state/cq2/{ws.window_id}/seen.json",
                 "state/cq2/schema/t.json"):
        assert name in modes
    loose = {p: oct(m) for p, m in modes.items() if m & DENIED}
    assert loose == {}, f"group-writable or world-accessible: {loose}"
    assert modes["state"] == 0o750 and modes["state/cost_history.jsonl"] == 0o640


def test_a_stricter_umask_narrows_the_modes_further(tmp_path):
    old = os.umask(0o077)
    try:
        open_store(tmp_path / "state").window("q", "w").claim(0, ["u1"], ["/x/u1"])
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "state")
    assert modes["q/w/claims/batch-0000.json"] == 0o600 and modes["q/w/claims"] == 0o700


# ----------------------------------------------------------------------------- path traversal

BAD_NAMES = ["../x", "a/../../b", "..", ".", ".hidden", "/etc", "/abs/path", "a\x00b", "a\nb", "",
             "\uff0e\uff0e",  # fullwidth dots: ".." once NFKC-normalised
             "\u2024\u2024/x", "a\\..\\b", "a\u202eb"]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_a_name_that_could_leave_its_directory_is_refused_at_every_entry_point(bad, tmp_path):
    def refused(field, fn, *args, **kwargs):
        with pytest.raises(ConfigError) as err:
            fn(*args, **kwargs)
        assert err.value.field == field, (fn, err.value)

    refused("name", Query, id=bad, streams=("orders",))
    refused("name", load_query, bad, tmp_path)
    refused("query_id", open_store(tmp_path).query, bad)
    refused("query_id", open_store(tmp_path).window, bad, "w")
    refused("window_id", open_store(tmp_path).window, "q", bad)
    refused("batch.query", make_batch, query=bad)
    refused("batch.window_id", make_batch, window_id=bad)
    refused("batch.window_id", Batch.from_dict, {**make_batch().to_dict(), "window_id": bad})
    refused("units", open_store(tmp_path).window("q", "w").claim, 0, [bad], [])
    refused("static", static_path, str(tmp_path / "static"), bad)
    if bad:  # an empty name is a Stream's until the key of streams={...} names it
        refused("streams", Stream, name=bad)
        refused("streams", Query, id="q", streams=(bad,))
    refused("static", Query, id="q", streams=("orders",), static=(bad,))
    assert list(tmp_path.iterdir()) == []  # refused before anything was made


@pytest.mark.parametrize("bad", [name for name in BAD_NAMES if name])
def test_a_dag_name_that_could_leave_the_state_directory_is_refused_before_the_sql_is_read(bad):
    from airflow_iqp.dag_factory import iqp_dag

    with pytest.raises(ConfigError) as err:
        iqp_dag(sql="SELECT k, count(*) AS n FROM t GROUP BY k", name=bad, streams={"t": "/landing"},
                window=dt.timedelta(minutes=4), deadline_offset=dt.timedelta(minutes=1))
    assert err.value.field == "name"


def test_batch_numbers_are_whole_and_not_negative():
    for bad in (-1, "../1", 1.5, True, None):
        with pytest.raises(ConfigError) as err:
            batch_name(bad)
        assert err.value.field == "batch"


def test_the_only_names_accepted_are_plain_ones():
    for good in ("cq2", "20270115T080000", "000001", "000001.csv", "orders_2027-01-15.parquet", "a..b", "été"):
        assert check_name(good, "f") == good
    assert check_within("/l/000001/orders.parquet", "/l", "f")
    assert check_within("memory://l/000001.csv", ["/other", "memory:///l"], "f")
    for bad in ("/l/../etc/passwd", "/lx/a", "/etc/passwd", "memory://l/../x.csv", "/l"):
        with pytest.raises(ConfigError):
            check_within(bad, "/l", "f")


class _StoreListing(MemoryFileSystem):
    """An object store's listing as some stores return it: keys with ``..`` in them, verbatim."""

    protocol = "evilstore"

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).replace("evilstore://", "memory://", 1))

    def ls(self, path, detail=True, **kwargs):
        root = self._strip_protocol(path).rstrip("/")
        out = super().ls(path, detail=True, **kwargs)
        return out + [{"name": f"{root}/../outside.csv", "size": 4, "type": "file"},
                      {"name": f"{root}/sub/../../escape.csv", "size": 4, "type": "file"},
                      {"name": "/elsewhere/000009.csv", "size": 4, "type": "file"},
                      {"name": f"{root}/bad\nname.csv", "size": 4, "type": "file"}]


def test_a_listed_key_that_resolves_outside_the_landing_directory_is_not_a_unit(caplog):
    fsspec.register_implementation("evilstore", _StoreListing, clobber=True)
    fs = fsspec.filesystem("evilstore")
    fs.pipe("/landing/000001.csv", b"a\n1\n")
    fs.pipe("/outside.csv", b"a\n1\n")
    stream = Stream(name="t", path="evilstore:///landing", format="csv")
    with caplog.at_level(logging.WARNING, logger="airflow_iqp.streams"):
        units = list_units("evilstore:///landing", [stream])
    assert [(u.name, u.path) for u in units] == [("000001.csv", "evilstore:///landing/000001.csv")]
    assert sum("ignored" in r.getMessage() for r in caplog.records) == 4
    # the plain memory store keeps such a key as a pseudo-directory "..": hidden, never a unit
    mem = fsspec.filesystem("memory")
    mem.pipe("/landing2/000001.csv", b"a\n1\n")
    mem.store["/landing2/../evil.csv"] = mem.store["/landing2/000001.csv"]
    assert [u.name for u in list_units("memory:///landing2", [Stream(name="t", path="memory:///landing2",
                                                                     format="csv")])] == ["000001.csv"]


def test_a_tampered_claim_or_work_cannot_make_a_batch_read_outside_its_landing(tmp_path):
    state, landing = tmp_path / "state", tmp_path / "landing"
    query = decompose("SELECT k, count(*) AS n FROM t GROUP BY k", id="tq", streams=["t"])
    save_query(state, Saved(query, (Stream(name="t", path=str(landing), format="csv"),)))
    ws = open_store(state).window("tq", "w")
    ws.claim(1, ["000001.csv"], [str(landing / "000001.csv")])
    for field, manifest in (("work.files", {"units": ["000001.csv"], "files": [str(landing / "../secret.csv")]}),
                            ("work.files", {"units": ["000001.csv"], "files": ["/etc/passwd"]}),
                            ("work.units", {"units": ["../../x"], "files": [str(landing / "000001.csv")]})):
        rewrite_claim(ws, 0, **manifest)  # a claim edited in the store
        for work in (batch_work(ws, 0), {**batch_work(ws, 1), **manifest}):  # or the job's work, by hand
            with pytest.raises(ConfigError) as err:  # refused before Spark is asked for anything
                execute_batch(None, work, backend="spark-submit")
            assert err.value.field == field
    assert ws.written_partials() == {} and not ws.has_partial(0)


def test_a_claim_of_a_templated_landing_path_names_files_of_its_rendered_path(tmp_path):
    from airflow_iqp.spark.batch import _check_work

    landing = tmp_path / "landing"
    query = decompose("SELECT k, count(*) AS n FROM t GROUP BY k", id="tq", streams=["t"])
    saved = Saved(query, (Stream(name="t", path=str(landing) + "/{{ data_interval_start | ts_nodash }}",
                                 format="csv"),))
    _check_work({"units": ["000001.csv"], "files": [str(landing / "20260101T000000" / "000001.csv")]}, saved)
    for files in ([str(landing / "../secret.csv")], ["/etc/passwd"]):
        with pytest.raises(ConfigError):
            _check_work({"units": ["000001.csv"], "files": files}, saved)


# ----------------------------------------------------------------------------- secrets


def test_no_connection_secret_reaches_the_logs_or_the_state_directory(tmp_path, monkeypatch, caplog, capfd):
    """A window planned and claimed with a Connect connection that carries a token, and a spark
    connection with a password: neither appears in any log record or any file of the state."""
    from airflow_iqp.hooks.spark import IQPSparkHook
    from airflow_iqp.operators.plan import BatchPlanOperator
    from airflow_iqp.backends import SparkConnect
    from airflow_iqp.options import Algorithm1, Arrival
    from tests.support.tasks import START, TI, context

    password = "pg-Pa55word-91c3"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002, "password": TOKEN}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": "local[2]", "login": "iqp", "password": password}))
    state = tmp_path / "state"
    with caplog.at_level(logging.DEBUG):
        entries = BatchPlanOperator(
            task_id="plan", query="cq2", landing=str(tmp_path / "landing"), state_dir=str(state),
            streams=TPCH_STREAMS, per_window=True, deadline_offset=dt.timedelta(seconds=100),
            arrival=Arrival(units=24, rate=1.0), backend=SparkConnect(),
            cut=Algorithm1(cost_hint={"kind": "linear", "per_unit": 0.6, "per_batch": 25},
                           final_agg_hint={"kind": "linear", "base": 25, "per_batch": 0.5}),
        ).execute(context(TI("plan"), end=START + dt.timedelta(minutes=4)))
        batch = Batch.from_dict(entries[0])
        batch.window_state().claim(batch.index, ["000001"], [str(tmp_path / "landing/000001/orders.parquet")])
        hook = IQPSparkHook("spark_connect_default")
        url = client_url(hook.connect_url())
        assert url.startswith("sc://localhost:15002/;token=")  # the hook would connect with it
        logging.getLogger("airflow_iqp.test").info("connecting to %s", redact_url(url))
        submit = IQPSparkHook("spark_default")
        assert submit.master == "local[2]" and password not in json.dumps(submit.submit_conf())
    secrets = [TOKEN, json.dumps(TOKEN)[1:-1], url.split("token=")[1], password]
    out, err = capfd.readouterr()  # Airflow's structured task log goes to the console
    logged = "\n".join([f"{r.getMessage()} {r.args!r}" for r in caplog.records] + [out, err])
    assert "plan stored in" in logged
    assert not [s for s in secrets if s in logged]
    leaked = [str(p) for p in state.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets)]
    assert leaked == []


def free_port() -> int:
    from iqp_dev.local_airflow import free_port as _free

    return _free()
