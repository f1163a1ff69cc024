"""Every example in ``examples/`` runs against the real API and workers, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.clients._client_support import ROOT


def run_example(name: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), "--fresh", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


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
