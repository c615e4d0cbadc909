"""The ``[iqp]`` section's defaults where nothing is configured."""

from __future__ import annotations

from pathlib import Path

from airflow_iqp import config


def test_the_state_directory_defaults_to_an_absolute_path_under_airflow_home(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__IQP__STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("AIRFLOW_HOME", "~/af")
    assert config.state_dir() == str(tmp_path / "user" / "af" / "iqp" / "state")
    monkeypatch.setenv("PROJECT", str(tmp_path / "project"))
    monkeypatch.setenv("AIRFLOW_HOME", "$PROJECT/home")
    assert config.state_dir() == str(tmp_path / "project" / "home" / "iqp" / "state")
    # A relative home is the same directory whatever the working directory is later.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRFLOW_HOME", "rel")
    assert config.state_dir() == str(tmp_path / "rel" / "iqp" / "state") and Path(config.state_dir()).is_absolute()
    # Unset (or empty): Airflow's own default home.
    for unset in (monkeypatch.delenv, lambda name: monkeypatch.setenv(name, "")):
        unset("AIRFLOW_HOME")
        assert config.state_dir() == str(tmp_path / "user" / "airflow" / "iqp" / "state")
    monkeypatch.setenv("AIRFLOW__IQP__STATE_DIR", str(tmp_path / "configured"))
    assert config.state_dir() == str(tmp_path / "configured")
