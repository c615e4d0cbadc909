"""The wheel holds the provider and nothing of the dev tooling.

``iqp_dev/`` (the local Airflow harness, whose auth config makes everybody admin, and the
demo, which needs a source checkout) and ``tests/`` must stay out of what users install.
The wheel is built from a copy of the source tree, so a stale ``build/`` or a concurrent
``pip install -e`` in the checkout can neither leak into it nor race with it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Never copied: environments, build leftovers, run outputs, and the benchmark results (1 GB).
_SKIP = {".git", ".venv", "build", "dist", "var", "spark-warehouse", "metastore_db", ".hypothesis",
         ".pytest_cache", "__pycache__", "results"}


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in _SKIP or n.endswith(".egg-info")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--quiet", "--disable-pip-version-check",
         "-w", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (whl,) = out.glob("airflow_iqp-*.whl")
    with zipfile.ZipFile(whl) as zf:
        yield zf


def _entry_points(zf: zipfile.ZipFile) -> str:
    (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    return zf.read(name).decode()


def test_wheel_holds_the_provider(wheel):
    names = set(wheel.namelist())
    assert "airflow_iqp/__init__.py" in names
    catalogue = {n for n in names if n.startswith("airflow_iqp/query/catalogue/") and n.endswith(".sql")}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "airflow_iqp" / "query" / "catalogue").glob("*.sql")}
    assert sources and catalogue == sources
    eps = _entry_points(wheel)
    assert "[apache_airflow_provider]" in eps and "airflow_iqp:get_provider_info" in eps
    assert "[airflow.plugins]" in eps and "airflow_iqp.plugins.iqp:IQPPlugin" in eps


def test_wheel_leaves_out_the_dev_tooling(wheel):
    names = wheel.namelist()
    leaked = [n for n in names
              if n.startswith(("iqp_dev/", "tests/", "benchmarks/", "dags/", "scripts/"))
              or Path(n).name in ("local_airflow.py", "demo.py")]
    assert leaked == []
    # Only the provider's package and its metadata at the top level.
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"airflow_iqp"}
