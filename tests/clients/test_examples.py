"""Every example in ``examples/`` runs against the real API and workers, with the command
``examples/README.md`` gives for it."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from typing import Any

import pytest

from tests.clients._client_support import ROOT, run_ok

#: the interpreter the README's commands name; a run from a checkout without ``.venv``
#: (an installed test tree) uses the interpreter running the tests instead
VENV_PYTHON = ".venv/bin/python"


def readme_commands() -> dict[str, list[str]]:
    """The commands ``examples/README.md`` gives, by script name, without their comment."""
    text = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if re.match(r"\S*python\S* examples/", line):
            argv = shlex.split(line.split("#", 1)[0])
            out[argv[1].removeprefix("examples/")] = argv
    return out


def test_readme_gives_a_runnable_command_for_every_example() -> None:
    scripts = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
    commands = readme_commands()
    assert sorted(commands) == scripts
    for argv in commands.values():
        # a bare `python` is the system interpreter, without the clients package
        assert argv[0] == VENV_PYTHON, argv
        assert (ROOT / argv[1]).is_file(), argv


def run_example(name: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    argv = readme_commands()[name]
    if not os.access(ROOT / argv[0], os.X_OK):
        argv = [sys.executable, *argv[1:]]
    out = run_ok([*argv, "--fresh", *args], env, 240)
    return json.loads(out.strip().splitlines()[-1])


def test_track_index_apas(cli_env: dict[str, str], workers: Any) -> None:
    out = run_example("track_index_apas.py", cli_env, "--limit", "500")
    assert out["events"] == 500
    assert out["weights_sum"] == pytest.approx(1.0)  # long-only, fully invested
    # 20 stocks track a 500-stock index to well under the index's own daily volatility
    assert 0 < out["rmse"] < 0.01


def test_forecast_drift_dvaw(cli_env: dict[str, str], workers: Any) -> None:
    out = run_example("forecast_drift_dvaw.py", cli_env, "--limit", "2500")
    assert out["events"] == 2500  # 2480 events + 20 delayed labels
    assert out["experts"] > 1
    # unit-norm comparator, N(0, I) inputs: predicting 0 would give RMSE about 1
    assert out["rmse"] < 0.5


def test_prevalence_nemsis(cli_env: dict[str, str], workers: Any) -> None:
    out = run_example("prevalence_nemsis.py", cli_env, "--limit", "2000")
    assert out["events"] == 2000
    truths = [p["true"] for p in out["phases"]]
    assert truths[0] < truths[1] < truths[2]  # the drift schedule reached the batches
    assert all(0.0 <= p["cc"] <= 1.0 and 0.0 <= p["acc"] <= 1.0 for p in out["phases"])
    assert out["prevalence_mae"] < 0.15


def test_classify_noisy_arow(cli_env: dict[str, str], workers: Any) -> None:
    out = run_example("classify_noisy_arow.py", cli_env, "--limit", "1500")
    assert out["events"] == 1500
    assert out["test_accuracy"] > 0.8  # the clean boundary is linear; 10% noise in training
