"""The example, benchmark and end-to-end DAGs configure iqp_dag through its typed objects: none passes
more than twelve arguments (issue 20)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12


def iqp_dag_calls():
    for path in sorted([*(ROOT / "dags").glob("*.py"), *(ROOT / "benchmarks" / "dags").glob("*.py"),
                         *(ROOT / "tests" / "e2e" / "dags").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "iqp_dag":
                yield path, node


def test_no_dag_passes_more_than_twelve_arguments_to_iqp_dag():
    calls = list(iqp_dag_calls())
    assert len(calls) >= 4
    for path, call in calls:
        assert all(k.arg for k in call.keywords), f"{path.name}:{call.lineno}: **kwargs hides the count"
        n = len(call.args) + len(call.keywords)
        assert n <= LIMIT, f"{path.name}:{call.lineno}: iqp_dag takes {n} arguments"
