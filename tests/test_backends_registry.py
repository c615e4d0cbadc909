"""One registry of backends: every layer finds a backend by its name there, and what differs
between backends is an attribute or a method of the backend's class, never a comparison of
names. The structure check reads the source; the unit tests use the registry."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import airflow_iqp
from airflow_iqp import backends
from airflow_iqp.backends import BACKENDS, Backend, SparkConnect, SparkSubmit
from airflow_iqp.errors import ConfigError
from airflow_iqp.window.config import QueryConfig
from tests.support.batches import TPCH_STREAMS

ROOT = Path(airflow_iqp.__file__).parent
#: What only the backends' own modules may compare with or dispatch on: a backend's name,
#: its name's last word (the short spelling a command line is tempted to take), its class.
NAMES = frozenset(BACKENDS) | {name.rsplit("-", 1)[-1] for name in BACKENDS}
CLASSES = frozenset(b.__name__ for b in BACKENDS.values())


def _literals(node: ast.AST) -> list[str]:
    """The backend names a comparison's operand is: a literal, or a tuple, list or set of them."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [v.value for v in values if isinstance(v, ast.Constant) and v.value in NAMES]


def _classes(node: ast.AST) -> list[str]:
    """The backend classes an operand names (``SparkConnect``, ``backends.SparkConnect``, a tuple of them)."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    named = [v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None for v in values]
    return [n for n in named if n in CLASSES]


def dispatches(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each place that compares a value with a backend's name, keys a
    table by backend names, or dispatches on a backend class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, f"compares with {what!r}") for what in _literals(operand) + _classes(operand)]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, f"keys a table by {what!r}") for k in node.keys if k is not None
                      for what in _literals(k)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, f"matches {what!r}") for what in _literals(node.value)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2):
            found += [(node.lineno, f"{node.func.id}(..., {what})") for what in _classes(node.args[1])]
    return found


def test_the_scan_finds_each_way_of_telling_backends_apart_by_name():
    sample = '''
if backend != "spark-connect": pass
if name in ("submit", "spark-submit"): pass
ALIASES = {"submit": "spark-submit", "spark-connect": 1}
ok = isinstance(b, (SparkSubmit, backends.SparkConnect))
same = type(b) is SparkConnect
match name:
    case "spark-submit": pass
'''
    assert sorted(dispatches(sample)) == [
        (2, "compares with 'spark-connect'"), (3, "compares with 'spark-submit'"), (3, "compares with 'submit'"),
        (4, "keys a table by 'spark-connect'"), (4, "keys a table by 'submit'"), (5, "isinstance(..., SparkConnect)"),
        (5, "isinstance(..., SparkSubmit)"), (6, "compares with 'SparkConnect'"), (8, "matches 'spark-submit'")]
    # Naming a backend is not telling backends apart: a default, a value recorded, a class used.
    assert dispatches('def f(backend="spark-submit"): return {"backend": "spark-connect"}, SparkSubmit.name') == []


def test_no_module_outside_the_backends_tells_backends_apart_by_name():
    found = [f"{path.relative_to(ROOT.parent)}:{line}: {what}" for path in sorted(ROOT.rglob("*.py"))
             if not path.is_relative_to(ROOT / "backends") for line, what in dispatches(path.read_text())]
    assert found == [], ("ask the backend's class (an attribute or a method of airflow_iqp/backends/) instead:\n"
                         + "\n".join(found))


# ----------------------------------------------------------------------------- the registry

def test_each_backend_is_registered_under_its_own_name_the_default_first():
    assert backends.names() == ("spark-submit", "spark-connect")
    assert all(BACKENDS[name].name == name for name in BACKENDS)
    assert QueryConfig(query="q", landing="/l", state_dir="/s", streams=TPCH_STREAMS).backend == backends.names()[0]


def test_the_package_exports_the_registered_classes():
    import airflow_iqp

    assert (airflow_iqp.SparkSubmit, airflow_iqp.SparkConnect) == (SparkSubmit, SparkConnect)
    assert Backend.named("spark-connect") is SparkConnect


@pytest.mark.parametrize("field", ["backend", "cost_history.backend"])
def test_an_unknown_name_is_a_config_error_naming_the_setting_and_listing_the_choices(field):
    with pytest.raises(ConfigError) as err:
        backends.get("submit", field)
    assert err.value.field == field
    assert str(err.value) == f"{field}: must be one of spark-submit, spark-connect, got 'submit'"


def test_a_name_or_a_typed_object_finds_its_class():
    assert backends.get("spark-connect") is SparkConnect
    assert backends.backend_class("spark-submit") is SparkSubmit
    assert backends.backend_class(SparkConnect(pool="p")) is SparkConnect
    for bad in ("connect", SparkConnect, None):
        with pytest.raises(ConfigError) as err:
            backends.backend_class(bad)
        assert err.value.field == "backend"
        assert "spark-submit, spark-connect, or SparkSubmit() / SparkConnect()" in str(err.value)


def test_the_runtime_config_refuses_an_unknown_backend_through_the_registry():
    with pytest.raises(ConfigError) as err:
        QueryConfig(query="q", landing="/l", state_dir="/s", streams=TPCH_STREAMS, backend="spark")
    assert err.value.field == "backend" and "spark-submit, spark-connect" in str(err.value)


def test_each_backend_says_what_differs_as_its_own_facts():
    for backend in BACKENDS.values():
        for fact in ("default_tail_lead", "default_cost", "default_final_agg", "job_startup",
                     "mapped_batches_take_turns", "timeout_overhead"):
            assert hasattr(backend, fact), (backend.name, fact)
        assert backend.runner.__func__ is not Backend.runner.__func__
        assert backend.calibration_runner.__func__ is not Backend.calibration_runner.__func__
    assert (SparkSubmit.job_startup, SparkSubmit.mapped_batches_take_turns) == (True, False)
    assert (SparkConnect.job_startup, SparkConnect.mapped_batches_take_turns) == (False, True)
    assert backends.typed_choices() == "SparkSubmit(...) or SparkConnect(...)"
    assert backends.typed_choices("()", turns=True) == "SparkConnect()"


def test_a_runner_belongs_to_its_backend_and_refuses_what_it_cannot_honour():
    submit = SparkSubmit.runner("spark_yarn", {"k": "v"}, driver_memory="2g")
    assert (submit.backend, submit.conn_id, submit.conf, submit.spark_kwargs) == (
        SparkSubmit, "spark_yarn", {"k": "v"}, {"driver_memory": "2g"})
    assert SparkConnect.runner().backend is SparkConnect
    with pytest.raises(ConfigError) as err:
        SparkConnect.runner(conf={"spark.executor.memory": "1g"})
    assert err.value.field == "conf"


def test_a_calibration_runner_records_its_backend_s_name():
    with SparkSubmit.calibration_runner(master="local[1]") as runner:
        assert (runner.name, runner.warm_up_first, runner.startup_seconds) == ("spark-submit", False, None)
    runner = SparkConnect.calibration_runner(url="sc://203.0.113.9:15002")  # opens no session until used
    assert (runner.name, runner.warm_up_first, runner.server_pid) == ("spark-connect", True, None)
    runner.close()


def test_a_third_backend_is_its_class_and_one_entry_of_the_registry(monkeypatch):
    @dataclass(frozen=True, kw_only=True)
    class SparkOnKubernetes(SparkSubmit):
        name: ClassVar[str] = "spark-k8s"
        default_cost: ClassVar[dict] = {"kind": "linear", "per_unit": 0.3, "per_batch": 40.0}

    monkeypatch.setitem(BACKENDS, SparkOnKubernetes.name, SparkOnKubernetes)
    cfg = QueryConfig(query="q", landing="/l", state_dir="/s", streams=TPCH_STREAMS,
                      **SparkOnKubernetes(fuse_tail=True).query_config())
    assert backends.get(cfg.backend) is SparkOnKubernetes
    assert "SparkOnKubernetes(...)" in backends.typed_choices()
    assert SparkOnKubernetes.runner().backend is SparkOnKubernetes


def test_the_calibrate_command_takes_the_registry_s_names():
    from airflow_iqp.cli.main import build_parser

    args = build_parser().parse_args(["calibrate", "--query", "cq3", "--data", "/d", "--backend", "spark-connect"])
    assert args.backend == "spark-connect"
    assert build_parser().parse_args(["calibrate", "--query", "cq3", "--data", "/d"]).backend == "spark-submit"
    bad = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "calibrate", "--query", "cq3", "--data", "/d",
                          "--backend", "connect"], capture_output=True, text=True, cwd=ROOT.parent)
    assert bad.returncode == 2 and "'spark-submit', 'spark-connect'" in bad.stderr
