"""The package layout's data flow, read from every module's imports (AST), and file sizes.

Allowed direction (issue 11): app → reports → scoring → metrics / loadgen → {adapters,
workloads, results, own_engine}; none of adapters, workloads, results, own_engine imports
harness; reports render stored artefacts, so they import neither the scorer nor metrics.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
    assert _unit("harness.scoring.ranking") == "harness.scoring" and _unit("workloads.agentic") == "workloads"
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
