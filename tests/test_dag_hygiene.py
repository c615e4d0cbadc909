"""DAG hygiene, provider registration and the compose file, through Airflow's own CLI."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A migrated SQLite home on default settings (no plugins folder, no local settings)."""
    home = tmp_path_factory.mktemp("airflow_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
    return env


def cli_json(env, *args):
    out = subprocess.run([AIRFLOW, *args, "-o", "json"], env=env, check=True, capture_output=True, text=True).stdout
    line = next(l for l in reversed(out.splitlines()) if l.startswith("[") or l.startswith("{"))
    return json.loads(line)


def test_example_dags_import_without_errors(home):
    assert cli_json(home, "dags", "list-import-errors", "--local") == []


def test_every_example_is_one_dag_per_query(home):
    report = cli_json(home, "dags", "report")
    files = {r["file"]: r for r in report}
    assert set(files) == {"iqp_cq2.py", "iqp_catalogue.py", "iqp_revenue.py"}
    dags = sorted(d for r in report for d in r["dags"])
    from airflow_iqp.query.catalogue import list_queries

    # one DAG per catalogued query, and the user's own SQL over a non-TPC-H stream
    assert dags == sorted([f"iqp_{q}" for q in list_queries()] + ["iqp_revenue_by_country"])
    # How long each file takes to parse is measured by benchmarks/parse_speed.py (goal < 1 s).


def test_parsing_the_examples_starts_no_engine():
    """A DAG file is parsed every few seconds by the DAG processor: parsing one must not load
    Spark, DuckDB or OR-Tools (seconds of import each), only the split and the planner's inputs."""
    code = (
        "import runpy, sys, glob\n"
        f"for f in sorted(glob.glob({str(ROOT / 'dags' / '*.py')!r})): runpy.run_path(f)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'duckdb', 'ortools', 'pandas', 'py4j'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


# The plugin listing (timetable, priority strategies, deadline reference) on default
# settings is checked in tests/plugins/test_iqp.py.


def test_provider_is_listed(home):
    providers = cli_json(home, "providers", "list")
    mine = [p for p in providers if p["package_name"] == "airflow-iqp"]
    assert mine and mine[0]["version"] == "0.1.0"


def test_compose_file_is_valid():
    """`docker compose config` where a compose client exists; the structure either way."""
    import yaml

    spec = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    services = spec["services"]
    for name in ("postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                 "airflow-triggerer", "spark-master", "spark-worker", "spark-connect"):
        assert name in services, name
    for name in ("airflow-scheduler", "airflow-triggerer", "spark-worker"):
        assert any(str(v).startswith("iqp-data:") for v in services[name]["volumes"]), name
    assert "postgresql" in services["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    # Spark Connect: on the standalone master, on the scheduler's loopback, behind its token;
    # the connection names "localhost" (pyspark sends a token in the clear to that name only).
    connect = services["spark-connect"]
    assert connect["network_mode"] == "service:airflow-scheduler"
    assert connect["environment"]["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
    command = " ".join(connect["command"])
    for part in ("SparkConnectServer", "--master spark://spark-master:7077",
                 "spark.connect.grpc.binding.address=127.0.0.1", "spark.connect.grpc.binding.port=15002"):
        assert part in command, part
    conn = json.loads(services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    assert (conn["host"], conn["port"]) == ("localhost", 15002) and conn["password"]
    client = (["docker", "compose"] if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
              else ["docker-compose"] if shutil.which("docker-compose") else None)
    if client is None:
        pytest.skip("no compose client on this machine: the structure was checked, `config` was not run")
    r = subprocess.run([*client, "config"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
