"""The layers of DESIGN.md, checked on the source: who may import whom, and module size."""

import ast
import subprocess
import sys
from pathlib import Path

import airflow_iqp

ROOT = Path(airflow_iqp.__file__).parent
HEAVY = ("airflow", "pyspark", "ortools", "matplotlib")
#: What the Spark jobs may use of the provider side: the fused tail's entry point.
SPARK_MAY_USE = ("airflow_iqp.window.tail",)
PROVIDER = ("airflow_iqp.window", "airflow_iqp.coordination", "airflow_iqp.backends", "airflow_iqp.operators",
            "airflow_iqp.sensors", "airflow_iqp.triggers", "airflow_iqp.hooks", "airflow_iqp.timetables",
            "airflow_iqp.plugins", "airflow_iqp.notifications", "airflow_iqp.dag_factory", "airflow_iqp.priority",
            "airflow_iqp.deadlines", "airflow_iqp.cli")
MAX_LINES = 400


def imports(path: Path) -> set[str]:
    """Every module a source file imports, at any depth of the file (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def modules(under: str = "") -> list[Path]:
    return sorted((ROOT / under).rglob("*.py"))


def loaded_by(*names: str) -> list[str]:
    """The heavy modules that importing ``airflow_iqp`` and ``names`` (and every module under
    them) pulls in."""
    code = (
        "import sys, pkgutil, importlib, airflow_iqp\n"
        f"for name in {names!r}:\n"
        "    m = importlib.import_module(name)\n"
        "    for sub in pkgutil.walk_packages(getattr(m, '__path__', []), name + '.'):\n"
        "        importlib.import_module(sub.name)\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return [m for m in out.split(",") if m]


def test_planning_the_decomposer_and_the_package_root_import_neither_airflow_nor_spark():
    assert loaded_by("airflow_iqp.planning", "airflow_iqp.query") == []


def test_the_window_runtime_imports_neither_airflow_nor_spark():
    assert loaded_by("airflow_iqp.window", "airflow_iqp.coordination") == []


def test_the_backends_load_neither_airflow_nor_spark_until_they_run():
    # The window runtime validates and plans with the backend classes; their runners import
    # the Airflow hooks and PySpark inside their methods.
    assert loaded_by("airflow_iqp.backends") == []


def test_the_spark_jobs_use_nothing_of_the_provider_but_the_fused_tail_entry_point():
    for path in modules("spark"):
        bad = sorted(m for m in imports(path)
                     if (m.startswith(PROVIDER) and m not in SPARK_MAY_USE) or m.split(".")[0] == "airflow")
        assert bad == [], f"{path.relative_to(ROOT.parent)} imports {bad}"


def test_nothing_outside_the_cli_imports_the_cli():
    for path in modules():
        if path.is_relative_to(ROOT / "cli"):
            continue
        bad = sorted(m for m in imports(path) if m.startswith("airflow_iqp.cli"))
        assert bad == [], f"{path.relative_to(ROOT.parent)} imports {bad}"


def test_the_package_imports_nothing_of_the_dev_tooling():
    # iqp_dev/, tests/ and benchmarks/ are not in the wheel (tests/test_wheel.py).
    for path in modules():
        bad = sorted(m for m in imports(path) if m.split(".")[0] in ("iqp_dev", "tests", "benchmarks"))
        assert bad == [], f"{path.relative_to(ROOT.parent)} imports {bad}"


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT.parent)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their seams: {long}"
