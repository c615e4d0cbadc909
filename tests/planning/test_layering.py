"""Layer 1 and the package root import no Airflow, Spark or OR-Tools."""

import subprocess
import sys

FORBIDDEN = ("airflow", "pyspark", "ortools", "matplotlib")


def test_planning_and_package_root_import_nothing_heavy():
    code = (
        "import sys, pkgutil, importlib, airflow_iqp, airflow_iqp.planning\n"
        "for m in pkgutil.iter_modules(airflow_iqp.planning.__path__):\n"
        "    importlib.import_module('airflow_iqp.planning.' + m.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"layer 1 imported: {out}"
