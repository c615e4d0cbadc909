"""Comments and docstrings state intent and invariants, not the history of a measurement.

Which earlier run, trial or commit measured what belongs in ``docs/decisions.md``; a comment
that says "in try s7_b this took 1.6 s" is stale the day the code changes. This scans every
comment and docstring of the package, the benchmarks, the dev tooling and the example DAGs
for the marks such a logbook leaves: a run's or trial's name, a session number, a commit hash.

The scan parses each source in the same process as the Spark tests; a py4j finalizer that
the garbage collector runs in the middle of a parse leaves it whole (tests/conftest.py keeps
py4j's INFO records, which format a traceback, from being made).
"""

import ast
import gc
import io
import logging
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "airflow_iqp").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                  *(ROOT / "iqp_dev").rglob("*.py"), *(ROOT / "dags").glob("*.py")])
#: What a logbook leaves: "session 4", "try s7_b", "tries/s8_quick_a", "(s6_a)", "trial 3", "at 2ef8175".
#: ("An earlier run" is left out: the window's earlier Airflow run is a thing the code talks about.)
LOGBOOK = re.compile(r"\bsession \d+\b|\btry s\d|\btries/|\bs\d+_(?:[a-z]|quick)\w*\b|\btrials?\b"
                     r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,10}\b", re.IGNORECASE)


def prose(text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment and docstring of a module's source."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def test_the_scan_finds_a_logbook_comment():
    sample = '"""Planned at 2.0: in try s7_b the batches ran late."""\n# session 4: 21 s (tries/s8_quick_a)\nx = 1\n'
    found = [m.group(0) for _line, text in prose(sample) for m in LOGBOOK.finditer(text)]
    assert sorted(found) == ["s8_quick_a", "session 4", "tries/", "try s7"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_comment_tells_the_history_of_a_measurement(path):
    found = [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r} in {text.strip()[:100]!r}"
             for line, text in prose(path.read_text()) for m in LOGBOOK.finditer(text)]
    assert found == [], "move the history to docs/decisions.md; say the intent here:\n" + "\n".join(found)


class _DroppedConnection:
    """What py4j's ClientServerConnection does when collected after its JVM has gone: it
    logs the failed send with its traceback (py4j/clientserver.py)."""

    def __init__(self) -> None:
        self.cycle = self  # only the cyclic collector frees it, at an allocation of its choosing

    def __del__(self) -> None:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError:
            logging.getLogger("py4j.clientserver").info("Error while sending or receiving.", exc_info=True)


def test_a_py4j_finalizer_run_inside_ast_parse_leaves_the_parse_whole(caplog):
    caplog.set_level(logging.INFO)  # what Airflow's logging sets for the root logger
    source = SOURCES[0].read_text()
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # collect at nearly every allocation: inside each parse
    try:
        for _ in range(5):
            for _ in range(50):
                _DroppedConnection()
            assert isinstance(ast.parse(source), ast.Module)
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
