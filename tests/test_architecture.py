"""The package layout's data flow, read from every module's imports (AST), and sizes.

Allowed direction (issue 11): app → reports → scoring → metrics / loadgen → {adapters,
workloads, results, own_engine}; none of adapters, workloads, results, own_engine imports
harness; reports render stored artefacts, so they import neither the scorer nor metrics.

Also (issue 25): no import cycle between modules; the reference engine (``own_engine``) stands
alone; the scorer and the reports import nothing of ``adapters`` (hardware profiles, prices and
the feature vocabulary they need live in ``results``); no function in ``harness`` is longer
than :data:`MAX_FUNCTION_LINES`. Every import counts, at the top of a module or inside a
function (and under ``if TYPE_CHECKING``). And ``tests/`` is a package mirroring the source folders
(``tests/harness/app/cli/`` tests ``harness/app/cli/``), but for a short allow-list.
"""

from __future__ import annotations

import ast
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "adapters", "own_engine", "workloads", "results", "reports")
LOWER = ("adapters", "workloads", "results", "own_engine")

# layer of each top-level unit; an import may only go to a unit of a lower (or the same) layer
LAYER = {
    "harness.app": 4,
    "reports": 3,
    "harness.scoring": 2,
    "harness.metrics": 1,
    "harness.loadgen": 1,
    **{p: 0 for p in LOWER},
}
FORBIDDEN = {
    ("reports", "harness.scoring"), ("reports", "harness.metrics"), ("reports", "harness.loadgen"),
    ("harness.metrics", "harness.loadgen"),  # records flow loadgen → metrics, never back
}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "harness":
        return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in ("app", "scoring", "metrics", "loadgen") else "harness"
    return parts[0] if parts[0] in PACKAGES else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append(target)
            out += [f"{target}.{a.name}" for a in node.names if node.module is None]
    return out


def _sources() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


def violations() -> list[str]:
    bad = []
    for path in _sources():
        src = _unit(_module_name(path))
        for target in _imports(path):
            dst = _unit(target)
            if dst is None or src is None or dst == src or dst == "harness":
                continue
            if src in LOWER and dst.startswith("harness"):
                bad.append(f"{path.relative_to(ROOT)} imports {target}: lower packages never import harness")
            elif (src, dst) in FORBIDDEN or LAYER.get(dst, 0) > LAYER.get(src, 0):
                bad.append(f"{path.relative_to(ROOT)} imports {target}: against the data flow ({src} → {dst})")
    return bad


def test_imports_follow_the_data_flow() -> None:
    assert violations() == []


def test_the_checker_catches_an_upstream_import(tmp_path, monkeypatch) -> None:
    # a lower package importing harness, and reports importing the scorer, are both caught
    assert _unit("harness.scoring.weighted.ranking") == "harness.scoring" and _unit("workloads.agentic") == "workloads"
    fake = ROOT / "workloads" / "_arch_probe.py"
    fake.write_text("from harness.metrics import compute_metrics\n")
    try:
        assert any("_arch_probe.py" in v and "never import harness" in v for v in violations())
    finally:
        fake.unlink()
    fake = ROOT / "reports" / "_arch_probe.py"
    fake.write_text("from harness.scoring import recommend\n")
    try:
        assert any("_arch_probe.py" in v and "against the data flow" in v for v in violations())
    finally:
        fake.unlink()


def test_no_oversized_harness_module() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "harness").rglob("*.py")}
    assert {k: v for k, v in sizes.items() if v > 450} == {}


# ------------------------------------------------------------------------------------------
# import cycles between modules


KNOWN_APP_CYCLES: set[frozenset[str]] = set()
"""Import cycles (each as the set of its modules) tolerated for now; a stale entry fails too."""


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in _sources()}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module of ``modules`` an imported dotted name lands in: the longest prefix that is
    one (``results.schema.Metrics`` → ``results.schema``); None outside the six packages."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        if (name := ".".join(parts[:end])) in modules:
            return name
    return None


def _module_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules ``path`` imports (anywhere in it), as edges of the module graph.

    ``import a.b.c`` is an edge to ``a.b.c``; ``from a.b import c`` to the submodule ``a.b.c``
    when there is one, else to ``a.b`` (the name is defined there or re-exported by it). The
    package ``__init__`` modules Python runs on the way to a submodule are not edges: only a
    real import of the package (``from harness.metrics import SLO``) is. Nothing else is left
    out.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
            targets += submodules
            if len(submodules) < len(node.names):
                targets.append(source)
    edges = {_resolve(target, modules) for target in targets}
    return {edge for edge in edges if edge is not None and edge != mod}


def import_graph() -> dict[str, set[str]]:
    """Module → the modules it imports, over the six packages."""
    modules = _modules()
    return {name: _module_imports(path, modules) for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of ``graph`` with more than one module: every set of
    modules that import each other, directly or through others (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.add(frozenset(component))
    return cycles


def mutual_imports(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Pairs of modules that import each other directly."""
    return {frozenset((a, b)) for a, targets in graph.items() for b in targets if a in graph.get(b, ())}


def cycle_problems(found: set[frozenset[str]], allowed: set[frozenset[str]]) -> list[str]:
    """One line per cycle not in ``allowed``, and per allowed cycle that is gone (or changed)."""
    problems = [f"import cycle: {' ⇄ '.join(sorted(cycle))}" for cycle in found - allowed]
    problems += [f"{' ⇄ '.join(sorted(cycle))} no longer forms this cycle: remove it from KNOWN_APP_CYCLES"
                 for cycle in allowed - found]
    return sorted(problems)


def test_no_two_modules_import_each_other() -> None:
    pairs = mutual_imports(import_graph())
    assert cycle_problems(pairs, {pair for pair in KNOWN_APP_CYCLES if len(pair) == 2}) == []


def test_no_import_cycle_between_modules() -> None:
    assert cycle_problems(import_cycles(import_graph()), KNOWN_APP_CYCLES) == []


@contextmanager
def _probe_files(files: dict[str, str]) -> Iterator[None]:
    """Write throw-away modules (path relative to the project root → source), then remove them."""
    paths = [ROOT / rel for rel in files]
    try:
        for path, text in zip(paths, files.values()):
            path.write_text(text, encoding="utf-8")
        yield
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


def test_the_checker_catches_an_import_cycle() -> None:
    # two modules importing each other (one of them inside a function), and a three-module ring
    with _probe_files({
        "workloads/_arch_probe_a.py": "from workloads._arch_probe_b import X\n",
        "workloads/_arch_probe_b.py": "X = 1\n\n\ndef f():\n    from . import _arch_probe_a\n",
        "results/_arch_probe_c.py": "import results._arch_probe_d\n",
        "results/_arch_probe_d.py": "from results._arch_probe_e import Y\n",
        "results/_arch_probe_e.py": "from typing import TYPE_CHECKING\nY = 1\nif TYPE_CHECKING:\n    from results import _arch_probe_c\n",
    }):
        graph = import_graph()
        pair = frozenset({"workloads._arch_probe_a", "workloads._arch_probe_b"})
        ring = frozenset({"results._arch_probe_c", "results._arch_probe_d", "results._arch_probe_e"})
        assert pair in mutual_imports(graph) and ring not in mutual_imports(graph)
        assert {pair, ring} <= import_cycles(graph)
        assert "import cycle: workloads._arch_probe_a ⇄ workloads._arch_probe_b" in cycle_problems(
            import_cycles(graph), KNOWN_APP_CYCLES)
    # a package importing its own submodule is no cycle; an allowed cycle that is gone is reported
    assert import_cycles({"p": {"p.a"}, "p.a": set()}) == set()
    assert cycle_problems(set(), {frozenset({"a", "b"})}) == [
        "a ⇄ b no longer forms this cycle: remove it from KNOWN_APP_CYCLES"]


# ------------------------------------------------------------------------------------------
# packages that must not import others


ISOLATED: dict[str, tuple[str, ...]] = {
    "own_engine": ("results", "harness", "adapters", "workloads", "reports"),  # the reference engine stands alone
    "harness.scoring": ("adapters",),  # hardware, prices, features: results.hardware / results.features
    "reports": ("adapters",),  # reports render stored artefacts
}
"""Package → the top-level packages it never imports (at any depth, anywhere in a module)."""


def isolation_violations() -> list[str]:
    bad = []
    for path in _sources():
        mod = _module_name(path)
        for package, forbidden in ISOLATED.items():
            if mod != package and not mod.startswith(package + "."):
                continue
            for target in _imports(path):
                if target.split(".")[0] in forbidden:
                    bad.append(f"{path.relative_to(ROOT)} imports {target}: {package} never imports "
                               f"{', '.join(forbidden)}")
    return bad


def test_the_reference_engine_stands_alone() -> None:
    assert [v for v in isolation_violations() if v.startswith("own_engine")] == []


def test_the_scorer_and_the_reports_import_nothing_of_adapters() -> None:
    assert [v for v in isolation_violations() if v.startswith(("harness/scoring", "reports"))] == []


def test_the_checker_catches_an_isolation_breach() -> None:
    with _probe_files({
        "own_engine/_arch_probe.py": "def f():\n    from results.model_geometry import kv_bytes_per_token\n",
        "own_engine/server/_arch_probe.py": "import adapters.base\n",
        "harness/scoring/_arch_probe.py": "from adapters.telemetry.hardware import HardwareProfile\n",
        "reports/_arch_probe.py": "from adapters.engines import openai\n",
    }):
        found = isolation_violations()
    for probe in ("own_engine/_arch_probe.py", "own_engine/server/_arch_probe.py", "harness/scoring/_arch_probe.py",
                  "reports/_arch_probe.py"):
        assert any(v.startswith(probe + " imports") for v in found), probe


# ------------------------------------------------------------------------------------------
# function size


MAX_FUNCTION_LINES = 80
"""Longest function (``def`` line to its last line, docstring included) allowed in ``harness``."""

LONG_FUNCTIONS_PENDING: set[str] = set()
"""``path::qualified name`` of the functions still longer than :data:`MAX_FUNCTION_LINES`."""


def long_functions(root: Path = ROOT / "harness") -> dict[str, int]:
    """``path::qualified name`` → lines, for every function (methods and nested ones included)
    under ``root`` longer than :data:`MAX_FUNCTION_LINES`."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{rel}::{name}"] = lines
                visit(child, f"{name}.", rel)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", rel)
            else:
                visit(child, prefix, rel)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), "", path.relative_to(ROOT).as_posix())
    return found


def test_no_long_function_in_harness() -> None:
    found = long_functions()
    assert {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS_PENDING} == {}
    assert [name for name in LONG_FUNCTIONS_PENDING if name not in found] == [], \
        "no longer long: remove from LONG_FUNCTIONS_PENDING"


def test_the_checker_catches_a_long_function() -> None:
    # MAX_FUNCTION_LINES lines in all fits; one more (a method, counted by its qualified name) does not
    body = [f"x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1)]
    fits = "def fits():\n" + "".join("    " + line for line in body)
    too_long = "class C:\n    def too_long(self):\n" + "".join("        " + line for line in [*body, "pass\n"])
    with _probe_files({"harness/metrics/_arch_probe.py": f"{fits}\n\n{too_long}"}):
        found = long_functions()
    assert found.get("harness/metrics/_arch_probe.py::C.too_long") == MAX_FUNCTION_LINES + 1
    assert "harness/metrics/_arch_probe.py::fits" not in found


# ------------------------------------------------------------------------------------------
# harness/app by job: arrows only point down (issue 25)

APP_LAYER = {"cli": 4, "run": 3, "search": 3, "importers": 3, "executors": 3, "trial": 2, "settings": 1, "core": 0}
"""Subpackage of ``harness.app`` → its level: a module may import its own subpackage and lower
levels only; jobs on one level (run, search, importers, executors) never import each other. ``trial``:
one engine's trial (start-up, measure, checks); ``settings``: what a run is asked for (the model,
its options, their checks); ``core``: what every layer shares (the model folder, signals)."""


def _app_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["harness", "app"] else None


def app_violations() -> list[str]:
    """Imports between ``harness.app`` subpackages against :data:`APP_LAYER`."""
    graph = import_graph()
    bad = []
    for source, targets in graph.items():
        src = _app_part(source)
        if src is None:
            continue
        for target in targets:
            dst = _app_part(target)
            if dst is None or dst == src:
                continue
            if dst not in APP_LAYER or src not in APP_LAYER or APP_LAYER[dst] >= APP_LAYER[src]:
                bad.append(f"{source} imports {target}: harness.app.{src} may not import harness.app.{dst}")
    return sorted(bad)


def test_harness_app_is_split_by_job_and_arrows_point_down() -> None:
    assert app_violations() == []
    assert {p.name for p in (ROOT / "harness" / "app").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(APP_LAYER)


def test_the_checker_catches_an_arrow_up_or_across_app_jobs() -> None:
    probes = {"harness/app/core/_arch_probe_up.py": "from harness.app.run import orchestrator\n",
              "harness/app/search/_arch_probe_across.py": "import harness.app.run.engine_turns\n"}
    with _probe_files(probes):
        found = app_violations()
    assert any("_arch_probe_up imports harness.app.run" in v for v in found), found
    assert any("_arch_probe_across imports harness.app.run.engine_turns" in v for v in found), found


def test_the_run_modes_read_the_typed_context_not_the_orchestrator() -> None:
    """Issue 39: a mode (one load point, ladder, tuned ladder) measures over the run's public
    context (harness.app.run.context); only the CLI holds the orchestrator, nothing reaches back
    into it."""
    graph = import_graph()
    upward = sorted(src for src, targets in graph.items() if "harness.app.run.orchestrator" in targets
                    and src != "harness.app.cli.run")
    assert upward == []
    modes = ("harness.app.run.point_mode", "harness.app.run.ladder_mode")
    assert all("harness.app.run.context" in graph[m] for m in modes)


# ------------------------------------------------------------------------------------------
# tests/ mirrors the source folders (issue 25)

TESTS = ROOT / "tests"
SOURCE_ROOTS = (*PACKAGES, "benchmarks")
"""Top-level source folders a test folder may mirror (``benchmarks``: scripts, no package)."""

TOP_LEVEL_TESTS = {
    "test_architecture.py": "the layout of the whole project, this file",
    "test_helpers.py": "the run-folder builders in tests/helpers.py, shared by every folder",
}
"""Test modules allowed at the top of ``tests/``, each with why it is there."""

TEST_ONLY_FOLDERS = {
    "e2e": "end-to-end tests across the whole pipeline (test modules, no source counterpart)",
    "fake_servers": "stand-in servers and drivers the tests start (no test modules)",
    "fixtures": "stored files the tests read (no Python, no package)",
}


def layout_problems(tests: Path = TESTS) -> list[str]:
    """One line per test module outside a folder that mirrors a source folder (``tests/a/b/test_x.py``
    needs ``a/b/`` or ``a/b.py`` in the project, ``a`` one of :data:`SOURCE_ROOTS`), and per folder
    of ``tests/`` without an ``__init__.py`` (every one is a package: ``tests.harness.app.cli``)."""
    bad = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        folder = rel.parent
        if "__pycache__" in rel.parts:
            continue
        if not folder.parts:
            if rel.name not in TOP_LEVEL_TESTS:
                bad.append(f"tests/{rel.as_posix()}: at the top of tests/; move it to the folder of what it tests")
        elif folder.parts[0] in TEST_ONLY_FOLDERS:
            if folder.parts != ("e2e",):
                bad.append(f"tests/{rel.as_posix()}: test modules belong in a folder mirroring the source")
        elif folder.parts[0] not in SOURCE_ROOTS or not (
                (ROOT / folder).is_dir() or (ROOT / folder).with_suffix(".py").is_file()):
            source = folder.as_posix()
            bad.append(f"tests/{rel.as_posix()}: no source folder {source}/ (or {source}.py) to mirror")
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if rel.parts[0] == "fixtures" or any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
            continue
        if not (folder / "__init__.py").is_file():
            bad.append(f"tests/{rel.as_posix()}/: no __init__.py (every test folder is a package)")
    if tests == TESTS and not (tests / "__init__.py").is_file():
        bad.append("tests/: no __init__.py")
    return bad


def test_tests_mirror_the_source_folders() -> None:
    assert layout_problems() == []


def test_the_checker_catches_a_misplaced_test(tmp_path: Path) -> None:
    files = ["__init__.py", "test_architecture.py", "test_flat_event.py",
             "harness/__init__.py", "harness/metrics/__init__.py", "harness/metrics/test_ok.py",
             "harness/nowhere/__init__.py", "harness/nowhere/test_x.py",
             "own_engine/server/test_no_init.py", "fake_servers/__init__.py", "fake_servers/test_in_helpers.py",
             "e2e/__init__.py", "e2e/test_whole_pipeline.py", "fixtures/run/summary.json", "docs/__init__.py",
             "docs/test_y.py"]
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert layout_problems(tmp_path) == [
        "tests/docs/test_y.py: no source folder docs/ (or docs.py) to mirror",
        "tests/fake_servers/test_in_helpers.py: test modules belong in a folder mirroring the source",
        "tests/harness/nowhere/test_x.py: no source folder harness/nowhere/ (or harness/nowhere.py) to mirror",
        "tests/test_flat_event.py: at the top of tests/; move it to the folder of what it tests",
        "tests/own_engine/: no __init__.py (every test folder is a package)",
        "tests/own_engine/server/: no __init__.py (every test folder is a package)",
    ]


# ------------------------------------------------------------------------------------------
# issue 38: one decision core: one judge of a point, one capacity estimator, one gates list

CORE = "harness/scoring/capacity/frontier.py"
SLO_COMPARISONS_ELSEWHERE = {
    "harness/metrics/slo.py": "the per-request goodput rule (DistServe): a request, not a point",
    "harness/scoring/checks/constraints.py":
        "the weighted lens's SLO stage on one-point runs (decided=True on a ladder run)",
    "harness/scoring/weighted/sensitivity.py": "the weighted lens's what-if on one-point runs",
    "harness/scoring/weighted/explanation.py": "the weighted lens's words on one-point runs",
    "harness/scoring/measured/repeats.py": "which SLOs a stored goodput was counted under (not a judgement)",
}


def _slo_comparisons(tree: ast.AST) -> list[int]:
    """Lines where a value is compared with, or divided by, an SLO's ``threshold_ms``."""
    found = []
    for node in ast.walk(tree):
        judged = isinstance(node, ast.Compare) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div))
        if judged and any(isinstance(n, ast.Attribute) and n.attr == "threshold_ms" for n in ast.walk(node)):
            found.append(node.lineno)
    return found


def _defined(tree: ast.Module) -> set[str]:
    """The module's own functions (methods of the lens's classes are its business)."""
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_one_judge_of_a_point_and_one_capacity_estimator() -> None:
    """A point's SLOs are judged, and a capacity read, in one module (``harness/scoring/capacity/frontier.py``)
    that ``bench run``'s ladder and ``bench search`` both call; the weighted lens keeps its own
    SLO stage for one-point runs only (the allow-list says why each other comparison exists)."""
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
             for p in (ROOT / "harness").rglob("*.py")}
    strays = {path: lines for path, tree in trees.items() if path != CORE and path not in SLO_COMPARISONS_ELSEWHERE
              and (lines := _slo_comparisons(tree))}
    assert strays == {}, \
        "an SLO judged outside the decision core: call harness.scoring.capacity.frontier.point_stats / slo_holds"
    core = {"point_stats", "slo_value", "slo_holds", "capacity_from", "capacity_of"}
    twins = {path: sorted(core & _defined(tree)) for path, tree in trees.items() if path != CORE and core & _defined(tree)}
    assert twins == {}
    for user in ("harness/app/run/ladder.py", "harness/app/search/capacity.py"):  # both jobs take the core's judge
        imported = {a.name for n in ast.walk(trees[user]) if isinstance(n, ast.ImportFrom)
                    and n.module == "harness.scoring.capacity.frontier" for a in n.names}
        assert "point_stats" in imported, user
    search = trees["harness/app/search/capacity.py"]
    assert "capacity_from" in {a.name for n in ast.walk(search) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_one_typed_slo_and_one_default_table() -> None:
    """SLOs travel as :class:`harness.metrics.SLO`; stored, as ``slo_table`` writes them and
    ``slos_of`` reads them back (no dict built by hand, no table joined into a string and parsed
    again); the default SLOs live in one table (``harness.scoring.verdict.decision.DEFAULT_SLOS``)."""
    by_hand, reparsed, tables = [], [], []
    for p in (ROOT / "harness").rglob("*.py"):
        path = p.relative_to(ROOT).as_posix()
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.DictComp) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "threshold_ms" and path != "harness/metrics/slo.py":
                by_hand.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "parse_slos" \
                    and node.args and isinstance(node.args[0], ast.Call) and getattr(node.args[0].func, "attr", "") == "join":
                reparsed.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DEFAULT_SLOS" for t in node.targets):
                tables.append(path)
    assert by_hand == [] and reparsed == []
    assert tables == ["harness/scoring/verdict/decision.py"]


def _stage_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants used as an elimination's stage: the first of a 2-tuple returned or
    stored, and what a ``stage`` name is compared with."""
    out = []
    for node in ast.walk(tree):
        values = [node.value] if isinstance(node, (ast.Return, ast.Assign)) and node.value is not None else []
        for v in values:
            if isinstance(v, ast.Tuple) and len(v.elts) == 2 and isinstance(v.elts[0], ast.Constant) \
                    and isinstance(v.elts[0].value, str):
                out.append((node.lineno, v.elts[0].value))
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "stage":
            for c in node.comparators:
                for k in ast.walk(c):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out.append((node.lineno, k.value))
    return out


def test_one_gates_list() -> None:
    """Every stage an engine can be excluded at, by the ladder decision or the weighted lens,
    is a gate of ``harness.scoring.gates.GATES`` (or the lens's one-point ``validity``)."""
    from harness.scoring.gates import LENS_ONLY_STAGES, STAGES

    modules = ["harness/scoring/verdict/decision.py", "harness/scoring/checks/constraints.py",
               "harness/scoring/checks/reliability.py", "harness/scoring/checks/validity.py",
               "harness/scoring/weighted/recommender.py", "harness/scoring/weighted/explanation.py",
               "harness/app/run/reporting.py"]
    unknown = {}
    for path in modules:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        if bad := [(line, s) for line, s in _stage_literals(tree) if s not in STAGES + LENS_ONLY_STAGES]:
            unknown[path] = bad
    assert unknown == {}
    assert len(set(STAGES)) == len(STAGES) == 7


def test_the_core_checkers_catch_a_second_judge(tmp_path) -> None:
    tree = ast.parse("def judge(v, slo):\n    return v <= slo.threshold_ms\n")
    assert _slo_comparisons(tree) == [2]
    assert _stage_literals(ast.parse("def g():\n    return 'latency', 'too slow'\n")) == [(2, "latency")]


# ------------------------------------------------------------------------------------------
# issue 42: harness/scoring grouped by what it holds, each group importing one way

SCORING_GROUPS_MAY_IMPORT: dict[str, set[str]] = {
    "capacity": set(),                   # a ladder's records → capacity at the SLO
    "verdict": {"capacity"},             # capacities → the main job's verdict (never the weighted lens)
    "measured": set(),                   # runs → the weighted lens's measurements
    "checks": {"measured"},              # measurements → hard constraints
    "weighted": {"measured", "checks"},  # survivors → score, ranking, sentence
}
"""What each subpackage of ``harness.scoring`` may import besides itself and the shared modules
at its root (``errors``, ``gates``, ``formatting``); ``harness/scoring/__init__.py``, the public
API, re-exports from any of them."""
SCORING_SHARED_IMPORTS_ALLOWED = {
    ("harness.scoring.formatting", "harness.scoring.measured.gather"):
        "a type hint only (under TYPE_CHECKING): condition_label reads a Measurement's rates",
}
"""Imports from a shared root module into a subpackage, each with why it is no dependency."""


def _scoring_group(module: str) -> str | None:
    """``"api"`` for the package itself, a subpackage's name, ``"shared"`` for a root module;
    None outside ``harness.scoring``."""
    parts = module.split(".")
    if parts[:2] != ["harness", "scoring"]:
        return None
    if len(parts) == 2:
        return "api"
    return parts[2] if parts[2] in SCORING_GROUPS_MAY_IMPORT else "shared"


def scoring_group_violations() -> list[str]:
    bad = []
    for path in (ROOT / "harness" / "scoring").rglob("*.py"):
        src_mod = _module_name(path)
        src = _scoring_group(src_mod)
        if src == "api":
            continue
        for target in _imports(path):
            dst = _scoring_group(target)
            if dst in (None, "api", "shared", src) or (src_mod, target) in SCORING_SHARED_IMPORTS_ALLOWED:
                continue
            if src == "shared" or dst not in SCORING_GROUPS_MAY_IMPORT[src]:
                bad.append(f"{path.relative_to(ROOT)} imports {target}: against the scorer's groups ({src} → {dst})")
    return bad


def test_scoring_groups_import_one_way() -> None:
    assert scoring_group_violations() == []
    assert set(SCORING_GROUPS_MAY_IMPORT) == {p.parent.name for p in (ROOT / "harness" / "scoring").glob("*/__init__.py")}


def test_the_scoring_group_checker_catches_a_backward_import() -> None:
    probes = {
        "harness/scoring/capacity/_arch_probe.py": "from ..verdict.verdict import decide\n",
        "harness/scoring/verdict/_arch_probe.py": "from harness.scoring.weighted.ranking import evaluate\n",
        "harness/scoring/_arch_probe.py": "from .checks.memory_fit import memory_fit\n",
    }
    for path, source in probes.items():
        fake = ROOT / path
        fake.write_text(source)
        try:
            assert [v for v in scoring_group_violations() if "_arch_probe.py" in v] == \
                [f"{path} imports {_imports(fake)[0]}: against the scorer's groups "
                 f"({_scoring_group(_module_name(fake))} → {_scoring_group(_imports(fake)[0])})"]
        finally:
            fake.unlink()


# ------------------------------------------------------------------------------------------
# issue 42: an engine is one registered class; no table of engine names outside the registry

REGISTRY = "adapters/registry.py"
ENGINE_TABLE_ROOTS = ("adapters", "harness", "results", "reports", "workloads", "own_engine")
ENGINE_NAME_LISTS_ALLOWED = {
    ("adapters/shims/ov_export.py", "facts"): (
        "openvino, transformers", "Python distributions whose versions an IR export records (packages in the "
                                  "engine's venv, not engines)"),
    ("harness/app/importers/__init__.py", "TOOLS"): (
        "sglang, vllm", "bench import --from: other benchmark tools' result formats (vLLM's and SGLang's benchmark "
                        "scripts, beside aiperf's and guidellm's), keyed by tool, not engines"),
}
"""(module, owner: the name the literal is assigned to, else the function it is in) → (the engine
names it may hold, why it is no engine table). Narrow on purpose: any other literal of these
modules naming two engines is caught like anywhere else."""


class _EngineTableFinder(ast.NodeVisitor):
    """Finds what names two or more engines in one place (:func:`engine_tables`): a dict literal's
    keys, a tuple/list/set literal's elements, ``dict(a=…, b=…)``'s keywords, and the names one
    function (the module body: one scope) compares a value with (``==``/``!=``, ``match`` cases:
    an ``if name == "vllm": … elif name == "sglang":`` chain)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names, self.found = set(names), []  # (line, owner, names)
        self.owner: list[str] = ["<module>"]
        self.compared: list[dict[str, int]] = [{}]

    def _hit(self, node: ast.AST, values: list[object], owner: str | None = None) -> None:
        hits = sorted({v for v in values if isinstance(v, str) and v in self.names})
        if len(hits) >= 2:
            self.found.append((node.lineno, owner or self.owner[-1], ", ".join(hits)))

    def _scope(self, node: ast.AST, name: str) -> None:
        self.owner.append(name)
        self.compared.append({})
        self.generic_visit(node)
        compared = self.compared.pop()
        self.owner.pop()
        if len(compared) >= 2:
            self.found.append((min(compared.values()), name, ", ".join(sorted(compared))))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = [t.id for t in targets if isinstance(t, ast.Name)]
        self.owner.append(named[0] if named else self.owner[-1])
        self.generic_visit(node)
        self.owner.pop()

    visit_AnnAssign = visit_Assign  # type: ignore[assignment]

    def visit_Dict(self, node: ast.Dict) -> None:
        self._hit(node, [k.value for k in node.keys if isinstance(k, ast.Constant)])
        self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        self._hit(node, [e.value for e in node.elts if isinstance(e, ast.Constant)])
        self.generic_visit(node)

    visit_List = visit_Set = visit_Tuple  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "dict":
            self._hit(node, [k.arg for k in node.keywords])
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in self.names:
                    self.compared[-1].setdefault(side.value, node.lineno)
        self.generic_visit(node)

    def visit_MatchValue(self, node: ast.MatchValue) -> None:
        if isinstance(node.value, ast.Constant) and node.value.value in self.names:
            self.compared[-1].setdefault(node.value.value, node.lineno)
        self.generic_visit(node)


def engine_tables(root: Path = ROOT, names: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """``path`` → ``"line: names (owner)"`` for every place that names two or more engines
    (:class:`_EngineTableFinder`; ``names``: default every registered engine) in the modules under
    :data:`ENGINE_TABLE_ROOTS` of ``root`` but :data:`REGISTRY`, less what
    :data:`ENGINE_NAME_LISTS_ALLOWED` allows: a table or a chain keyed by engine name, which belongs
    on the engines' adapter classes."""
    if names is None:
        from adapters.registry import engine_names

        names = engine_names()
    found: dict[str, list[str]] = {}
    for top in ENGINE_TABLE_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == REGISTRY:
                continue
            finder = _EngineTableFinder(tuple(names))
            finder.visit(ast.parse(path.read_text(encoding="utf-8")))
            for line, owner, hits in sorted(finder.found):
                allowed = ENGINE_NAME_LISTS_ALLOWED.get((rel, owner))
                if allowed is None or allowed[0] != hits:
                    found.setdefault(rel, []).append(f"{line}: {hits} ({owner})")
    return found


def test_no_engine_table_outside_the_registry() -> None:
    """Adding an engine touches its own module (adapters/engines/) and its test only: what the
    harness knows of an engine is declared on its adapter class (adapters.base.EngineTraits) and
    read through adapters.registry, never from a table of engine names or a chain of engine-name
    comparisons elsewhere."""
    assert engine_tables() == {}


def test_every_allowed_engine_name_list_is_still_there() -> None:
    from adapters.registry import engine_names

    for (rel, owner), (hits, _) in ENGINE_NAME_LISTS_ALLOWED.items():
        finder = _EngineTableFinder(engine_names())
        finder.visit(ast.parse((ROOT / rel).read_text(encoding="utf-8")))
        assert (owner, hits) in {(o, h) for _, o, h in finder.found}, f"{rel}: {owner} no longer lists {hits}: remove it"


def test_the_checker_catches_an_engine_table(tmp_path: Path) -> None:
    planted = {
        "harness/app/run/_probe.py": 'MAPPERS = {"vllm": 1, "sglang": 2}\n',
        "results/_probe.py": 'def f(name):\n    return name in ("own", "llamacpp", "x")\n',
        "workloads/_probe.py": 'AUTO = ["vllm"]\nONE = {"vllm": 1, "other": 2}\n'  # one engine name: no table
                               'def g(name):\n    return name == "vllm"\n'  # one comparison: no chain
                               'def h(name):\n    return name == "sglang"\n',  # in another function
        "adapters/_kw.py": 'TABLE = dict(vllm=1, sglang=2)\nONE = dict(vllm=1, other=2)\n',
        "harness/_chain.py": 'def pick(name):\n    if name == "vllm":\n        return 1\n'
                             '    elif name == "sglang":\n        return 2\n    return 0\n',
        "harness/_match.py": 'def pick(name):\n    match name:\n        case "own":\n            return 1\n'
                             '        case "llamacpp":\n            return 2\n',
        "reports/_neq.py": 'def keep(e):\n    return e != "own" and "vllm" != e\n',
        # the importers' exemption is narrow: TOOLS may name vllm and sglang, another table there is caught
        "harness/app/importers/__init__.py": 'TOOLS = {"vllm": 1, "sglang": 2, "aiperf": 3}\n'
                                             'ENGINES = {"vllm": 1, "own": 2}\n',
        "adapters/registry.py": 'NAMES = ("own", "vllm")\n',  # the registry itself may
        "tests/_probe.py": 'NAMES = ("own", "vllm")\n',  # tests are not scanned
    }
    for rel, text in planted.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert engine_tables(tmp_path, ("own", "vllm", "sglang", "llamacpp")) == {
        "adapters/_kw.py": ["1: sglang, vllm (TABLE)"],
        "harness/_chain.py": ["2: sglang, vllm (pick)"],
        "harness/_match.py": ["3: llamacpp, own (pick)"],
        "harness/app/importers/__init__.py": ["2: own, vllm (ENGINES)"],
        "harness/app/run/_probe.py": ["1: sglang, vllm (MAPPERS)"],
        "reports/_neq.py": ["2: own, vllm (keep)"],
        "results/_probe.py": ["2: llamacpp, own (f)"],
    }
