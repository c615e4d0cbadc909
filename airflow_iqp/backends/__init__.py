"""The backends, by name: the one registry every layer finds a backend through.

A backend is one class behind :class:`~airflow_iqp.backends.base.Backend`: the user's typed
options (``SparkSubmit(pool=...)``), its name, its built-in default costs and other facts,
how a task runs its batch or final step (:meth:`~Backend.runner`) and how ``airflow-iqp
calibrate`` measures it (:meth:`~Backend.calibration_runner`). Plans, metrics, ``QueryConfig``
and the cost history record its :attr:`~Backend.name`; :func:`get` turns the name back
into the class. Adding a backend is a module of its own and one import line here.

Pure Python at import, like the classes it lists (no Airflow, no Spark).
"""

from __future__ import annotations

from typing import Any

from airflow_iqp.backends.base import Backend, CalibrationRunner, Runner
from airflow_iqp.backends.spark_connect import SparkConnect
from airflow_iqp.backends.spark_submit import SparkSubmit
from airflow_iqp.errors import ConfigError

#: The backends by name (``QueryConfig.backend``, the cost history's ``backend``), the
#: default first. Each registers as its class is defined (:meth:`Backend.named`); adding a
#: backend is its module and its import above.
BACKENDS: dict[str, type[Backend]] = Backend.registered()

__all__ = ["BACKENDS", "Backend", "CalibrationRunner", "Runner", "SparkConnect", "SparkSubmit", "backend_class",
           "get", "names", "typed_choices"]


def names() -> tuple[str, ...]:
    """The backends' names, the default first."""
    return tuple(BACKENDS)


def get(name: Any, field: str = "backend") -> type[Backend]:
    """The backend named ``name``; else a ConfigError naming ``field`` (the setting that
    gave the name) and listing the choices."""
    return Backend.named(name, field)


def backend_class(value: Any, field: str = "backend") -> type[Backend]:
    """The backend of a name or of a typed backend object; else a ConfigError naming
    ``field`` that lists both."""
    if isinstance(value, Backend) and type(value) in BACKENDS.values():
        return type(value)
    if isinstance(value, str) and value in BACKENDS:
        return BACKENDS[value]
    raise ConfigError(f"must be one of {', '.join(BACKENDS)}, or {typed_choices('()', joint=' / ')} "
                      f"(airflow_iqp.options), got {value!r}", field)


def typed_choices(call: str = "(...)", *, joint: str = " or ", turns: bool = False) -> str:
    """The typed backends as a user writes them, e.g. ``SparkSubmit(...) or SparkConnect(...)``;
    with ``turns``, only those whose every mapped batch takes a turn on the cluster."""
    return joint.join(f"{b.__name__}{call}" for b in BACKENDS.values() if b.mapped_batches_take_turns or not turns)
