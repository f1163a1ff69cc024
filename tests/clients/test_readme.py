"""The README's Python block runs as written, against the real API, broker, Redis and workers.

The block is taken from ``README.md`` as it stands and run as a script with the interpreter
the README names (``.venv/bin/python``), with ``ONLINEPREDICT_API_URL`` pointing at the test
API, which is how a user runs it next to ``make up``.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
from typing import Any

from tests.clients._client_support import ROOT


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_python_block_is_complete() -> None:
    """One block; every name it uses is imported or assigned in it (no ``X``, ``y`` from
    nowhere)."""
    blocks = readme_python_blocks()
    assert len(blocks) == 1
    tree = ast.parse(blocks[0])
    bound = {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    bound |= {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert used - bound - set(dir(builtins)) == set()


def test_readme_python_block_runs(cli_env: dict[str, str], workers: Any) -> None:
    (block,) = readme_python_blocks()
    python = ROOT / ".venv" / "bin" / "python"
    interpreter = str(python) if os.access(python, os.X_OK) else sys.executable
    r = subprocess.run(
        [interpreter, "-c", block],
        cwd=ROOT,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    printed = r.stdout.strip().splitlines()[-1]
    # the prediction, then the model's figures: all 500 events were learned
    assert "'events': 500," in printed, printed
