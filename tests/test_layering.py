"""The layering rule: learners import only numpy and the standard library (and numba, only
in the compiled kernels' module, loaded lazily)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = ("fastapi", "aiokafka", "redis", "pydantic", "prometheus_client", "service", "clients")


def _loaded_after_import_learners(candidates: list[str]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter holds after ``import learners``."""
    code = (
        "import sys, learners\n"
        "assert learners.REGISTRY\n"
        f"print(*[m for m in {candidates!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_importing_learners_pulls_in_no_service_dependency() -> None:
    assert _loaded_after_import_learners(list(FORBIDDEN)) == []


def _offline_modules() -> list[str]:
    """Every module of a family's ``offline`` subpackage (``learners/*/offline/``)."""
    found = []
    for path in (ROOT / "learners").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "offline" in parts:
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(found)


def test_importing_learners_loads_no_offline_reference() -> None:
    """Offline references (tests and reproductions only) stay out of the service's imports."""
    offline = _offline_modules()
    assert "learners.transductive.offline.slab_1d" in offline, offline
    assert _loaded_after_import_learners(offline) == []
    assert _loaded_after_import_learners(["learners.transductive.logistic"]) != []  # can fail


def _imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


#: the one module allowed to import the optional accelerator
KERNELS = ROOT / "learners" / "_kernels.py"


def test_learners_source_imports_only_numpy_and_stdlib() -> None:
    allowed = set(sys.stdlib_module_names) | {"numpy", "learners", "__future__"}
    for path in (ROOT / "learners").rglob("*.py"):
        bad = _imported_roots(path) - allowed - ({"numba"} if path == KERNELS else set())
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
    assert "numba" in _imported_roots(KERNELS)  # can fail: the exception is used


def test_importing_learners_does_not_load_numba() -> None:
    """numba (~0.3 s to import) is loaded on the first compiled step, not by ``import``."""
    assert _loaded_after_import_learners(["numba", "learners._kernels"]) == []


def test_clients_import_neither_learners_nor_service() -> None:
    for path in (ROOT / "clients").rglob("*.py"):
        bad = _imported_roots(path) & {"learners", "service"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
