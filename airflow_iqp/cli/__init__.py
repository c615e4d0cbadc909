"""The ``airflow-iqp`` command line. Each subcommand lives in its own module."""

from __future__ import annotations

from pathlib import Path

from airflow_iqp.errors import ConfigError


def read_input(path: Path, option: str) -> str:
    """The text of a file named by a command-line option; one clear line if it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", option) from None
