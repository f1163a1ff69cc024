"""The README's "Use it" blocks run as written, against the real API, broker, Redis and workers.

The blocks are taken from ``README.md`` as it stands. The curl block runs in bash with the
README's ``localhost:8000`` pointed at the test API; the Python block runs as a script with
the interpreter the README names (``.venv/bin/python``), with ``ONLINEPREDICT_API_URL``
pointing at the test API, which is how a user runs it next to ``make up``.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import shutil
import sys
from typing import Any

import pytest

from tests.clients._client_support import ROOT, run_ok


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def readme_use_it_shell_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Use it", 1)[1]
    (block,) = re.findall(r"^```bash\n(.*?)^```", section, flags=re.S | re.M)[:1]
    return block


def json_documents(text: str) -> list[Any]:
    """The JSON documents printed one after the other (with or without whitespace)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        doc, i = decoder.raw_decode(text, i)
        out.append(doc)
        while i < len(text) and text[i].isspace():
            i += 1
    return out


def test_readme_curl_block_runs(cli_env: dict[str, str], workers: Any) -> None:
    """Create, stream, predict and label with curl, the prediction id taken from the answer."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    host = cli_env["ONLINEPREDICT_API_URL"].removeprefix("http://").rstrip("/")
    block = readme_use_it_shell_block()
    assert "localhost:8000" in block
    out = run_ok(
        ["bash", "-euo", "pipefail", "-c", block.replace("localhost:8000", host)], cli_env, 60
    )
    answers = json_documents(out)  # curl -s prints its answers without a newline
    created, accepted, predicted, labelled = answers
    assert created["id"] == "demand", created
    assert accepted["accepted"] == 2, accepted
    pid = predicted["predictions"][0]["prediction_id"]
    assert labelled == {"status": "accepted", "event_id": f"label:{pid}"}, labelled


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
    printed = run_ok([interpreter, "-c", block], cli_env, 180).strip().splitlines()[-1]
    # the prediction, then the model's figures: all 500 events were learned
    assert "'events': 500," in printed, printed
