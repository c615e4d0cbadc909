"""The test tree mirrors the source tree.

``tests/<package path>/test_<module>.py`` tests ``airflow_iqp/<package path>/<module>.py``
(or the package ``<module>/``); several files of one module are
``test_<module>_<topic>.py``. The dev tooling and the benchmarks are mirrored under
``tests/iqp_dev/`` and ``tests/benchmarks/``. Real-Spark tests of a ``spark/`` module are
``tests/spark/test_<module>[_<topic>].py`` like any other; the ``spark`` marker, not the
place, sets them apart.

Apart from the mirror, and nothing else:

* the suites that start real Airflow processes end to end: ``tests/e2e/``, and
  ``tests/cluster/`` on the cluster harness. One rule: a test module is in one of them if
  and only if it is marked ``airflow`` (``scripts/test.sh`` runs those two directories'
  modules in its Airflow runs and every test not marked ``airflow`` in its other lane: a
  module marked elsewhere would run in neither);
* the whole-package checks of :data:`WHOLE_PACKAGE`, at ``tests/`` top level;
* ``tests/support/``, the helpers the tests share, which holds no test.

Every directory of test modules is a package (``tests.x.y``), so that two test files of the
same name in two directories do not collide; the DAG folders of the suites apart are not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: The package the tree mirrors at its top; these other source trees are mirrored in a
#: directory of their own name.
PACKAGE = "airflow_iqp"
OTHER_SOURCES = ("iqp_dev", "benchmarks")

#: The suites that start real Airflow processes end to end.
APART = ("e2e", "cluster")

#: The checks of the whole package (or repository), which test no one module.
WHOLE_PACKAGE = {
    "test_layout.py": "this check",
    "test_layering.py": "the layers' imports, import circles, module size",
    "test_comments.py": "comments state intent, not the history of a measurement",
    "test_wheel.py": "what the wheel holds",
    "test_security.py": "who may reach what, across the package",
    "test_dag_arguments.py": "the example, benchmark and end-to-end DAGs' iqp_dag arguments",
    "test_dag_hygiene.py": "the example DAGs, the provider's registration and the compose file, through Airflow's CLI",
}

#: The helpers the tests share.
SUPPORT = "support"

AIRFLOW_MARK = re.compile(r"\bpytest\.mark\.airflow\b")


def _mirrored(rel: Path) -> tuple[str, list[str], str]:
    """(source tree, package path in it, ``<stem>`` of ``test_<stem>.py``) of a test file under ``tests/``."""
    *dirs, name = rel.parts
    source = PACKAGE
    if dirs and dirs[0] in OTHER_SOURCES:
        source, dirs = dirs[0], dirs[1:]
    return source, dirs, name.removeprefix("test_").removesuffix(".py")


def mirrored_module(rel: Path, root: Path = ROOT) -> Path | None:
    """The source module that the test file at ``rel`` (a path under ``tests/``) mirrors, or None.

    ``test_<stem>.py`` mirrors the longest ``<module>`` that ``<stem>`` starts with, up to an
    underscore, that is a module or a package in the mirrored directory."""
    source, dirs, stem = _mirrored(rel)
    base = root.joinpath(source, *dirs)
    for end in range(len(stem), 0, -1):
        if end < len(stem) and stem[end] != "_":
            continue
        module = stem[:end]
        for candidate in (base / f"{module}.py", base / module / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def misplaced(rel: Path, root: Path = ROOT) -> str | None:
    """Why a test file at ``rel`` (under ``tests/``) breaks the layout, or None."""
    top = rel.parts[0] if len(rel.parts) > 1 else None
    if top in APART:
        return None
    if top == SUPPORT:
        return "tests/support/ holds the shared helpers, no tests"
    if top is None and rel.name in WHOLE_PACKAGE:
        return None
    if mirrored_module(rel, root) is None:
        source, dirs, stem = _mirrored(rel)
        return (f"tests/{rel.as_posix()} mirrors no module: no {'/'.join([source, *dirs])}/<module>.py "
                f"(or package) for test_{stem}.py = test_<module>[_<topic>].py; move it to the module it "
                f"tests, to tests/{APART[0]}/ if it starts Airflow, or list it in WHOLE_PACKAGE")
    return None


def all_test_files() -> list[Path]:
    return sorted(p.relative_to(TESTS) for p in TESTS.rglob("test_*.py"))


def test_every_test_file_mirrors_a_source_module_or_is_listed_apart():
    problems = [why for rel in all_test_files() if (why := misplaced(rel))]
    assert not problems, "\n".join(problems)


def test_the_whole_package_checks_listed_exist():
    assert sorted(n for n in WHOLE_PACKAGE if not (TESTS / n).is_file()) == []


def test_the_suites_apart_hold_every_test_that_starts_airflow_and_nothing_else():
    wrong = [f"tests/{rel.as_posix()}: " + ("in a suite apart but not marked airflow" if rel.parts[0] in APART
                                             else f"marked airflow: it belongs in tests/{APART[0]}/")
             for rel in all_test_files()
             if (rel.parts[0] in APART) != bool(AIRFLOW_MARK.search((TESTS / rel).read_text()))]
    assert not wrong, "\n".join(wrong)


def test_every_directory_of_test_modules_is_a_package():
    dirs = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    dag_folders = {d for d in dirs if d.name.startswith("dags")}
    missing = sorted(str(d.relative_to(ROOT)) for d in dirs - dag_folders if not (d / "__init__.py").is_file())
    assert missing == []


@pytest.mark.parametrize("rel", [
    "provider/test_runtime.py",          # airflow_iqp.runtime is gone
    "spark/test_state_claims.py",        # the pure state store, tested under spark/
    "unit/window/test_costs.py",         # grouped by kind, not mirrored
    "test_runtime.py",
    "window/test_fixed_plans.py",        # a topic without its module
    "support/test_helpers.py",
    "iqp_dev/test_harness.py",
])
def test_a_test_file_that_mirrors_no_module_is_refused(rel):
    assert misplaced(Path(rel)) is not None


@pytest.mark.parametrize("rel,module", [
    ("test_options.py", "airflow_iqp/options.py"),
    ("window/test_replan.py", "airflow_iqp/window/replan.py"),
    ("window/test_plan_fixed_plans.py", "airflow_iqp/window/plan.py"),
    ("spark/test_steps_correctness.py", "airflow_iqp/spark/steps.py"),
    ("test_dag_factory.py", "airflow_iqp/dag_factory.py"),
    ("test_store.py", "airflow_iqp/store/__init__.py"),
    ("planning/test_models.py", "airflow_iqp/planning/models/__init__.py"),
    ("iqp_dev/test_local_airflow.py", "iqp_dev/local_airflow.py"),
    ("benchmarks/test_streaming_app.py", "benchmarks/streaming_app.py"),
])
def test_a_test_file_names_the_module_it_mirrors(rel, module):
    assert misplaced(Path(rel)) is None
    assert mirrored_module(Path(rel)) == ROOT / module
