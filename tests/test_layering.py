"""The layers of DESIGN.md, checked on the source: who may import whom, no import circle, and
module size."""

import ast
import subprocess
import sys
from pathlib import Path

import airflow_iqp

ROOT = Path(airflow_iqp.__file__).parent
HEAVY = ("airflow", "pyspark", "ortools", "matplotlib")
#: The layers, from the inside out (docs/architecture.md): a module imports, when it is
#: imported, only from its own layer and the ones before it. A backend's runner (provider
#: code in a module the window runtime reads its facts from) imports upwards inside its
#: methods only.
SEAMS = ("airflow_iqp.backends",)
LAYERS = (
    ("base", ("airflow_iqp.errors", "airflow_iqp._values", "airflow_iqp.paths")),
    ("planning", ("airflow_iqp.planning",)),
    ("models", ("airflow_iqp.inputs", "airflow_iqp.query", "airflow_iqp.streams", "airflow_iqp.landing",
                "airflow_iqp.filecheck", "airflow_iqp.store", "airflow_iqp.options", "airflow_iqp.config",
                "airflow_iqp.backends")),
    ("window", ("airflow_iqp.window", "airflow_iqp.coordination")),
    ("spark", ("airflow_iqp.spark",)),
    ("provider", ("airflow_iqp.hooks", "airflow_iqp.operators", "airflow_iqp.sensors", "airflow_iqp.triggers",
                  "airflow_iqp.timetables", "airflow_iqp.plugins", "airflow_iqp.notifications",
                  "airflow_iqp.dag_factory", "airflow_iqp.priority", "airflow_iqp.deadlines")),
    ("cli", ("airflow_iqp.cli",)),
)
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


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int | None:
    """The index of ``module``'s layer (None: the package root, or not the package's)."""
    for i, (_name, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def test_every_module_is_in_a_layer():
    lost = [module_name(p) for p in modules() if module_name(p) != "airflow_iqp" and layer(module_name(p)) is None]
    assert lost == [], f"give these a layer in LAYERS (and docs/architecture.md): {lost}"


def imports_at_load(path: Path) -> set[str]:
    """The modules a source file imports when it is imported: not those its functions import."""
    found = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                continue  # for type checkers only: not run
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.add(child.module)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_a_module_imports_only_from_its_own_layer_and_the_ones_before_it():
    """At import time, everywhere; in functions too, but in a backend's runner (:data:`SEAMS`)."""
    for path in modules():
        name = module_name(path)
        me = layer(name)
        if me is None:
            continue
        seen = imports_at_load(path) if name.startswith(SEAMS) else imports(path)
        bad = sorted(f"{m} ({LAYERS[layer(m)][0]})" for m in seen
                     if m.startswith("airflow_iqp.") and layer(m) is not None and layer(m) > me)
        assert bad == [], f"{path.relative_to(ROOT.parent)} ({LAYERS[me][0]}) imports {bad}"


def test_the_spark_jobs_import_nothing_of_airflow():
    for path in modules("spark"):
        bad = sorted(m for m in imports(path) if m.split(".")[0] == "airflow")
        assert bad == [], f"{path.relative_to(ROOT.parent)} imports {bad}"


def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at any depth of the file). An import of a
    name from a package is an import of the package's ``__init__``; a submodule imported from
    it (``from airflow_iqp.store import files``) is that submodule."""
    names = {module_name(p) for p in modules()}
    out = {}
    for path in modules():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module in names:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names
                deps |= subs or {node.module}
        out[module_name(path)] = deps - {module_name(path)}
    return out


def test_no_import_circle():
    """No module imports, directly or through others, a module that imports it back."""
    g = graph()
    circles = []
    for start in sorted(g):
        seen, stack = set(), [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for dep in sorted(g.get(node, ())):
                if dep == start:
                    circles.append(" -> ".join([*trail, start]))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*trail, dep]))
    assert circles == [], "import circles:\n" + "\n".join(sorted(circles, key=len)[:10])


def test_the_package_imports_nothing_of_the_dev_tooling():
    # iqp_dev/, tests/ and benchmarks/ are not in the wheel (tests/test_wheel.py).
    for path in modules():
        bad = sorted(m for m in imports(path) if m.split(".")[0] in ("iqp_dev", "tests", "benchmarks"))
        assert bad == [], f"{path.relative_to(ROOT.parent)} imports {bad}"


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT.parent)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their seams: {long}"


#: The names of the state store's layout: its documents, logs and directories.
LAYOUT_FILES = ("plan.json", "replan.json", "report.json", "late.json", "arrivals.json", "deadline_risk.json",
                "seen.json", "query.json", "result.manifest.json", "metrics.json", "cost_history.jsonl")
LAYOUT_DIRS = ("claims", "partials", "result", "attempts", "cpu", "schema", "deadline_missed", "_turns", "work",
               "waiting", "running", "calibration")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _texts(node: ast.AST) -> list[str]:
    """The literal text of a string constant or an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return []


def layout_joins(path: Path) -> list[str]:
    """Where a source file names a file of the layout, or joins a directory of it to a path."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            for text in _texts(node):
                if any(text.endswith(f) or f"{f}/" in text or f"/{f}" in text for f in LAYOUT_FILES):
                    found.append(f"line {node.lineno}: {text!r}")
        joined = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = [node.left, node.right]
        elif isinstance(node, ast.Call) and (getattr(node.func, "attr", None) in ("join", "joinpath", "glob")
                                             or getattr(node.func, "id", None) == "Path"):
            joined = node.args
        for part in joined:
            for text in _texts(part):
                if text.strip("/").split("/")[0] in LAYOUT_DIRS or text.startswith("batch-"):
                    found.append(f"line {node.lineno}: joins {text!r}")
    return found


def test_no_module_outside_the_store_names_or_joins_a_path_of_the_layout():
    """The state store (airflow_iqp/store/) owns where everything lives; the rest asks it by meaning."""
    bad = {str(p.relative_to(ROOT.parent)): hits for p in modules()
           if not p.is_relative_to(ROOT / "store") and (hits := layout_joins(p))}
    assert bad == {}, f"ask the store (airflow_iqp.store) instead: {bad}"
