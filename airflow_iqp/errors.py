"""Errors shared by every layer. Pure Python: safe to import on Spark executors."""

from __future__ import annotations


class IQPError(Exception):
    """Base class of airflow-iqp's own errors."""


class ConfigError(IQPError, ValueError):
    """Bad input or configuration. The message names the thing to fix.

    ``field`` is the dotted path of the offending setting (e.g. ``arrival.rate``)
    when there is one; the message then starts with it.
    """

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def under(self, prefix: str) -> "ConfigError":
        """The same error for a setting nested under ``prefix`` (e.g. ``queries[0]``)."""
        return ConfigError(self.message, f"{prefix}.{self.field}" if self.field else prefix)


class DataError(IQPError):
    """Input data that cannot be processed correctly (corrupt file, wrong schema)."""
