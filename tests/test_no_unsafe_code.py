"""No pickle, eval or exec anywhere in the shipped code: state must load safely from Redis."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("learners", "service", "clients")
BANNED_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
BANNED_CALLS = {"eval", "exec", "__import__"}


def _sources() -> list[pathlib.Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    files += list((ROOT / "benchmarks").rglob("*.py")) + list((ROOT / "tests").rglob("*.py"))
    return [p for p in files if "node_modules" not in p.parts]


def test_no_pickle_eval_or_exec() -> None:
    problems = []
    for path in _sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module.split(".")[0]}
            else:
                names = set()
            if names & BANNED_MODULES:
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {names}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in BANNED_CALLS
            ):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {node.func.id}")
            if isinstance(node, ast.keyword) and node.arg == "allow_pickle":
                if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno} allow_pickle")
    assert not problems, "\n".join(problems)
