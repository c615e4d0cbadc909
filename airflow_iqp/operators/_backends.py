"""What :class:`~airflow_iqp.operators.batch.BatchOperator` and
:class:`~airflow_iqp.operators.final.FinalOperator` share about their backend: it is found
through the registry (:mod:`airflow_iqp.backends`), by name or typed object, and runs the
task's Spark work through its runner (:meth:`~airflow_iqp.backends.base.Backend.runner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_iqp import backends
from airflow_iqp.backends import Backend, Runner


class OnBackend:
    """An operator that runs its Spark work on a backend's runner (``self._runner``)."""

    _runner: Runner
    #: The backend's name (``"spark-submit"``, ``"spark-connect"``).
    backend: str

    def _use_backend(self, backend: Any, conn_id: str | None, conf: Mapping[str, Any] | None,
                     spark_kwargs: Mapping[str, Any] | None) -> None:
        """Run on ``backend``, a name or a typed backend object, whose ``conn_id`` and
        ``conf`` are the defaults of those given here."""
        cls = backends.backend_class(backend)
        conn_id = conn_id or getattr(backend, "conn_id", None)
        conf = conf if conf is not None else getattr(backend, "conf", None)
        self._runner = cls.runner(conn_id, conf, **(spark_kwargs or {}))
        self.backend = cls.name

    @property
    def backend_class(self) -> type[Backend]:
        """The backend's class: its facts and capabilities."""
        return self._runner.backend

    @property
    def conn_id(self) -> str | None:
        """The Spark connection the backend uses (None: the ``[iqp]`` default)."""
        return self._runner.conn_id

    @property
    def conf(self) -> dict:
        """The Spark conf of the backend's jobs (none on a backend that takes none)."""
        return self._runner.conf

    def on_kill(self) -> None:
        self._runner.on_kill()
