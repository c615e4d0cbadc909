"""IQPSparkHook: where the provider's Spark work runs, by spark-submit or on a Spark Connect server.

It owns what the Spark jobs need around them: the clean environment spark-submit runs
with, the spark-submit binary, the local-mode conf and the zip of the package shipped to
the executors. The spark-submit itself is the Spark provider's
:class:`~airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook` (its command
line, its log handling, its ``on_kill``), given the binary and a complete environment: this
process's ``os.environ`` and ``PATH`` stay as they are. A Connect session is opened on a
``spark_connect`` connection, as the Spark provider's ``PySparkOperator`` does, and this
process's environment is left as it was found when the session ends.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_iqp import config
from airflow_iqp.errors import ConfigError, DataError, IQPError
from airflow_iqp.spark.entry import JOB_ERROR_VAR
from airflow_iqp.spark.connect import CONNECT_MODE_VAR, client_url
from airflow_iqp.spark.submit import build_pyfiles_zip, spark_submit_binary, submit_env, submit_spec

#: What a Spark Connect client sets in its process's environment.
CONNECT_VARS = (CONNECT_MODE_VAR, "SPARK_REMOTE")
#: The connection that stands for ``spark_default`` when it does not exist (``airflow db
#: migrate`` does not create it): Spark on every core of this machine.
LOCAL_CONNECTION = {"conn_type": "spark", "host": "local[*]"}


def spark_connection(conn_id: str, field: str = "backend.conn_id") -> Connection:
    """The Airflow connection ``conn_id``; for a ``spark_default`` that does not exist,
    :data:`LOCAL_CONNECTION`. Any other connection that does not exist is a ConfigError
    naming ``field``, the setting that named it."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if conn_id == config.DEFAULTS["spark_conn_id"]:
            return Connection(conn_id=conn_id, **LOCAL_CONNECTION)
        raise ConfigError(f"the Airflow connection {conn_id!r} does not exist: create it (in the UI, with `airflow "
                          f"connections add`, or as AIRFLOW_CONN_{conn_id.upper()}='{json.dumps(LOCAL_CONNECTION)}' "
                          f"in every Airflow process's environment), or leave {field} unset for Spark on local[*]",
                          field) from None


class _SubmitHook(SparkSubmitHook):
    """The Spark provider's spark-submit hook, reading its connection as :func:`spark_connection`
    does (the provider's own default for a missing one is YARN)."""

    @classmethod
    def get_connection(cls, conn_id: str) -> Connection:
        return spark_connection(conn_id)


def refuse_connect_conf(conf: Mapping[str, Any] | None) -> None:
    """A ConfigError naming ``conf`` if there is any: a running Spark Connect server takes
    its conf when it starts, not from a client."""
    if conf:
        raise ConfigError(f"a running Spark Connect server cannot take Spark conf ({', '.join(sorted(conf))}): "
                          f"give it when the server starts (airflow-iqp connect-server start --conf KEY=VALUE), "
                          f"or run on the spark-submit backend", "conf")


class IQPSparkHook(BaseHook):
    """Runs the provider's Spark jobs: through spark-submit on a ``spark`` connection, or in a
    session on a ``spark_connect`` connection.

    :param conn_id: the connection (default ``[iqp] spark_conn_id``; for :meth:`session`, a
        ``spark_connect`` one such as ``[iqp] spark_connect_conn_id``).
    :param conf: Spark conf for spark-submit (``--conf``), on top of the local-mode defaults
        for a local master. A Connect session refuses any.
    :param spark_binary: the spark-submit to run (default: the connection's ``spark-binary``
        extra, else :func:`~airflow_iqp.spark.submit.spark_submit_binary`: the one on PATH, or
        pyspark's own beside this interpreter, which a worker without an activated venv has).
    :param ship_package: ship the ``airflow_iqp`` package to the executors as ``--py-files``
        (default ``[iqp] ship_package``).
    :param env_vars: more environment for spark-submit, on top of :meth:`environment`.
    :param submit_kwargs: more of the Spark provider's ``SparkSubmitHook`` arguments
        (``driver_memory``, ``executor_cores``, ``deploy_mode``, ...).
    """

    conn_name_attr = "conn_id"
    default_conn_name = config.DEFAULTS["spark_conn_id"]
    hook_name = "Intermittent Query Processing: Spark"

    def __init__(self, conn_id: str | None = None, *, conf: Mapping[str, Any] | None = None,
                 spark_binary: str | None = None, ship_package: bool | None = None,
                 env_vars: Mapping[str, Any] | None = None, **submit_kwargs: Any) -> None:
        super().__init__()
        self.conn_id = conn_id or config.get("spark_conn_id")
        #: The setting that named the connection, for the error when it does not exist.
        self.conn_field = "backend.conn_id" if conn_id else "[iqp] spark_conn_id"
        self.conf = {k: str(v) for k, v in (conf or {}).items()}
        self._spark_binary = spark_binary
        self.ship_package = config.ship_package() if ship_package is None else ship_package
        self.env_vars = {k: str(v) for k, v in (env_vars or {}).items()}
        self.submit_kwargs = submit_kwargs
        self._submit_hook: SparkSubmitHook | None = None
        self._session: Any = None

    def get_conn(self) -> Any:
        """The Spark provider's hook of the running spark-submit, if one was started."""
        return self._submit_hook

    # ------------------------------------------------------------------ spark-submit

    def _conn(self) -> Connection:
        return spark_connection(self.conn_id, self.conn_field)

    @property
    def master(self) -> str:
        """The Spark master of the connection, read as the Spark provider reads it
        (``local[*]`` for a ``spark_default`` that does not exist)."""
        conn = self._conn()
        if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
            master = conn.host
        else:
            master = f"{conn.conn_type}://{conn.host or ''}"
        return f"{master}:{conn.port}" if conn.port else master

    @property
    def spark_binary(self) -> str:
        """The spark-submit that runs: given, or the connection's ``spark-binary``, or the one
        on PATH, or pyspark's own beside this interpreter."""
        if self._spark_binary:
            return self._spark_binary
        return self._conn().extra_dejson.get("spark-binary") or spark_submit_binary()

    def submit_conf(self) -> dict[str, str]:
        """The ``--conf`` of a submit: the local-mode defaults for a local master only, then ``conf``."""
        return submit_spec("", master=self.master, conf=self.conf)["conf"]

    def environment(self) -> dict[str, str]:
        """The complete environment spark-submit runs with: this process's, without what a
        Spark Connect session left in it, with this interpreter for the driver and workers and
        the package importable (:func:`~airflow_iqp.spark.submit.submit_env`), plus ``env_vars``."""
        return {**submit_env(), **self.env_vars}

    def py_files(self) -> str | None:
        """The zip of the package for ``--py-files``, when it is shipped."""
        return str(build_pyfiles_zip()) if self.ship_package else None

    def submit_hook(self, application: str, application_args: Sequence[str] = (), *,
                    name: str = "airflow-iqp") -> SparkSubmitHook:
        """The Spark provider's hook for one spark-submit of ``application``."""
        kwargs = {**self.submit_kwargs}
        py_files = self.py_files()
        if py_files and not kwargs.get("py_files"):
            kwargs["py_files"] = py_files
        return _SubmitHook(conf=self.submit_conf(), conn_id=self.conn_id, name=name,
                               application_args=[str(a) for a in application_args],
                               spark_binary=self.spark_binary, **kwargs)

    def submit(self, application: str, application_args: Sequence[str] = (), *, name: str = "airflow-iqp") -> None:
        """Run ``application`` through spark-submit and wait for it; raises if it fails.

        The provider's hook gets no ``env_vars`` (it would add them to a copy of
        ``os.environ``) but the complete :meth:`environment` as the child's ``env``. A job
        that fails with its own error (:func:`~airflow_iqp.spark.batch_job.report_error`)
        raises it here with its message first; the spark-submit command line, which the
        Spark provider's error repeats in full, is only logged.
        """
        self._submit_hook = self.submit_hook(application, application_args, name=name)
        with tempfile.TemporaryDirectory(prefix="iqp-job-") as tmp:
            error_file = os.path.join(tmp, "error.json")
            try:
                self._submit_hook.submit(application, env={**self.environment(), JOB_ERROR_VAR: error_file})
            except AirflowException as exc:
                job_error = _job_error(error_file)
                if job_error is None:
                    raise
                self.log.error("spark-submit failed: %s", exc)
                raise job_error from None

    def on_kill(self) -> None:
        """Kill the running spark-submit (the Spark provider's ``on_kill``), or interrupt the
        running Connect session's work."""
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
        if self._session is not None:
            self._session.interruptAll()

    # ------------------------------------------------------------------ Spark Connect

    def connect_url(self) -> str:
        """The ``sc://`` URL of the ``spark_connect`` connection (the Spark provider's ``SparkConnectHook``):
        its password is Spark Connect's token, ``;token=`` in the URL."""
        return SparkConnectHook(self.conn_id).get_connection_url()

    @contextmanager
    def session(self, app_name: str = "airflow-iqp") -> Iterator[Any]:
        """A Spark Connect session on the connection, stopped on exit.

        A Spark Connect client marks its process (``SPARK_CONNECT_MODE_ENABLED``) and never
        clears the mark; on exit these variables are as they were before the session.
        """
        refuse_connect_conf(self.conf)
        from pyspark.sql import SparkSession

        url = client_url(self.connect_url())
        _mask_token(url)
        before = {k: os.environ.get(k) for k in CONNECT_VARS}
        try:
            self._session = SparkSession.builder.remote(url).appName(app_name).create()
            try:
                yield self._session
            finally:
                self._session.stop()
                self._session = None
        finally:
            _restore(before)


def _job_error(path: str) -> Exception | None:
    """The error a job wrote to ``path`` (:data:`~airflow_iqp.spark.batch_job.JOB_ERROR_VAR`), as
    its own class when it is one of airflow-iqp's, else an :class:`IQPError` naming its type."""
    import json

    try:
        with open(path) as fh:
            said = json.load(fh)
    except (OSError, ValueError):
        return None
    kind, message = str(said.get("type", "")), str(said.get("message", ""))
    known = {"DataError": DataError, "ConfigError": ConfigError}
    return known[kind](message) if kind in known else IQPError(f"{kind}: {message}")


def _mask_token(url: str) -> None:
    """Hide the URL's token from task logs, as written in the URL (quoted) and as given: Airflow masks
    a connection's password as given, not its quoted form in the URL, where a message may quote it."""
    from urllib.parse import unquote

    from airflow.sdk.log import mask_secret

    for part in url.split(";")[1:]:
        key, _, value = part.partition("=")
        if key == "token" and value:
            mask_secret(value)
            mask_secret(unquote(value))


def _restore(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value

