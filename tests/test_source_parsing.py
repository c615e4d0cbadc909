"""The hygiene tests parse the project's sources in the same process as the Spark tests; a
py4j finalizer that the garbage collector runs in the middle of a parse leaves it whole
(tests/conftest.py keeps py4j's INFO records, which format a traceback, from being made)."""

from __future__ import annotations

import ast
import gc
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    source = (ROOT / "airflow_iqp" / "spark" / "tail.py").read_text()
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
