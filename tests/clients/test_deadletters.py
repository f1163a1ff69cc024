"""The events a model refused, visible to its user (issue 32 item 2), through the real API,
real worker processes, broker and Redis: ``GET /v1/models/{id}/deadletters`` (newest first,
bounded, each with its reason, event id, position and time) through the SDK and the CLI;
the status' ``refusing`` and ``refused_share``; ``onlinepredict_model_refused_share``; a
deleted model's list goes with it."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from clients import Client
from clients.cli import app
from clients.errors import ValidationError

pytestmark = pytest.mark.service

WAIT_S = 60.0
runner = CliRunner()


def _wait(api: Client, model: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = _get(api, model)
        if done(body["status"] or {}):
            return body
        time.sleep(0.1)
    raise AssertionError(f"the workers did not get there in {WAIT_S}s: {body}")


def _get(api: Client, model: str) -> dict[str, Any]:
    """The model as the API answers it (the status' ``refusing`` and ``refused_share``)."""
    r = httpx.get(f"{api.base_url}/v1/models/{model}", timeout=10)
    r.raise_for_status()
    return r.json()


def _send(api: Client, model: str, events: list[dict[str, Any]]) -> None:
    api.send_events(
        model, [e["x"] for e in events], [e["y"] for e in events], ids=[e["id"] for e in events]
    )


def _valid(n: int, prefix: str, rng: np.random.Generator) -> list[dict[str, Any]]:
    w = np.array([1.0, -2.0, 0.5])
    X = rng.normal(size=(n, 3))
    return [{"id": f"{prefix}{i}", "x": X[i].tolist(), "y": float(X[i] @ w)} for i in range(n)]


def test_refused_events_are_listed_with_why(
    api_url: str, workers: list[subprocess.Popen[bytes]]
) -> None:
    model = f"dl-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(5)
    with Client(api_url, api_key="", timeout=10) as api:
        api.create_model(model, kind="dvaw-ensemble", dim=3)
        _send(api, model, _valid(30, "a", rng))
        _send(api, model, [{"id": "bad-x", "x": [1e20, 1e20, 1e20], "y": 1.0}])
        _send(api, model, _valid(10, "b", rng))
        _send(api, model, [{"id": "bad-y", "x": [1.0, 0.5, 0.25], "y": 1e149}])
        _send(api, model, _valid(10, "c", rng))
        body = _wait(api, model, lambda s: s.get("applied", 0) + s.get("rejected", 0) == 52)
        status = body["status"]
        assert (status["applied"], status["rejected"]) == (50, 2), status
        # learned on: predictions stay on the data's scale (the model predicted 2.1e18)
        assert abs(api.predict(model, [1.0, 0.0, 0.0]).value) < 10

        letters = api.deadletters(model)
        assert [d["event_id"] for d in letters] == ["bad-y", "bad-x"]  # newest first
        for d in letters:
            assert "refused the event" in d["reason"] and "The guard" in d["reason"], d
            assert d["partition"] == body["partition"] and d["topic"]
            assert abs(d["time"] - time.time()) < 600
        assert letters[0]["offset"] > letters[1]["offset"]
        assert "y = 1e+149" in letters[0]["reason"] and "x[0] = 1e+20" in letters[1]["reason"]
        assert [d["event_id"] for d in api.deadletters(model, limit=1)] == ["bad-y"]
        for bad in (0, 1001):
            with pytest.raises(ValidationError):
                api.deadletters(model, limit=bad)

        # 2 of its recent events refused: not "refusing"
        assert status["refusing"] is False and 0 < status["refused_share"] < 0.5, status

        r = runner.invoke(
            app, ["models", "deadletters", model, "--api-url", api_url, "--json", "--limit", "5"]
        )
        assert r.exit_code == 0, r.output
        assert [d["event_id"] for d in json.loads(r.stdout)] == ["bad-y", "bad-x"]
        r = runner.invoke(app, ["models", "deadletters", model, "--api-url", api_url])
        assert r.exit_code == 0 and "bad-x" in r.stdout and "The guard" in r.stdout, r.output

        # most of its recent events refused: its status and the metric say so
        hostile = [{"id": f"h{i}", "x": [1e30, 1.0, 1.0], "y": 1.0} for i in range(60)]
        _send(api, model, hostile)
        body = _wait(api, model, lambda s: s.get("rejected", 0) == 62 and s.get("refusing"))
        assert body["status"]["refused_share"] >= 0.5
        listed = httpx.get(f"{api_url}/v1/models", timeout=10).json()["models"]
        assert next(m for m in listed if m["id"] == model)["status"]["refusing"] is True
        text = api.metrics_text()
        line = next(
            ln
            for ln in text.splitlines()
            if ln.startswith(f'onlinepredict_model_refused_share{{model="{model}"}}')
        )
        assert float(line.split()[-1]) >= 0.5, line
        assert len(api.deadletters(model, limit=1000)) == 62

        api.delete_model(model)
        api.create_model(model, kind="dvaw-ensemble", dim=3)
        assert api.deadletters(model) == []
        api.delete_model(model)
