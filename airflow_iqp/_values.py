"""Checks of the typed options' values (:mod:`airflow_iqp.options`): each returns the value
normalised, or raises a :class:`~airflow_iqp.errors.ConfigError` naming the field. Pure Python."""

from __future__ import annotations

import datetime as dt
import math
from typing import Mapping

from airflow_iqp.errors import ConfigError


def _set(obj, name: str, value) -> None:  # a frozen dataclass's normalised field
    object.__setattr__(obj, name, value)


def _seconds(value, field: str, *, optional: bool = False) -> float | None:
    """Seconds >= 0 from a number or a timedelta (None only if ``optional``)."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    return _number(value, field, low=0, strict=False, optional=optional, unit=" seconds (or a timedelta)")


def _number(value, field: str, *, low: float, strict: bool, optional: bool = False, unit: str = "") -> float | None:
    if value is None and optional:
        return None
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (value > low if strict else value >= low))
    if not ok:
        raise ConfigError(f"must be a number {'>' if strict else '>='} {low:g}{unit}, got {value!r}", field)
    return float(value)


def _whole(value, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"must be a whole number >= {low}, got {value!r}", field)
    return value


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"must be True or False, got {value!r}", field)
    return value


def _name(value, field: str, what: str) -> str | None:
    """An optional non-empty string (a connection id, a pool, a class path)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        raise ConfigError(f"must be {what}, got a dict: Spark conf goes in SparkSubmit(conf={{...}}); "
                          f"a Spark Connect server takes its conf when it is started", field)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"must be {what}, got {value!r}", field)
    return value


def _model(value, field: str, parse) -> dict | None:
    """A cost model's dict (a copy), checked by ``parse``; None stays None (the default)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"must be a dict with a 'kind', or None for the backend's default, got {value!r}", field)
    parse(dict(value), field)
    return dict(value)


def _copy(model: dict | None) -> dict | None:
    return None if model is None else dict(model)
