"""The state budget at the door: ``POST /v1/models`` refuses, with a 422 that names the
memory formula and the figure, a model whose declared state (learner + running
statistics) exceeds ``max_state_bytes``, before anything is allocated or stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

import learners
from service.api import create_app
from service.config import Settings
from service.metrics.running import REGRET_MAX_DIM, RunningStats

pytestmark = pytest.mark.service

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def client(make_settings) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    settings: Settings = make_settings()  # the defaults: max_dim 100000, 256 MiB of state
    assert settings.max_state_bytes == 256 * MiB
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(scope="module")
def tiny_client(make_settings) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    # below the 800-byte error ring every model keeps: nothing fits
    with TestClient(create_app(make_settings(max_state_bytes=512))) as c:
        yield c


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_vaw_too_big_for_the_budget_is_a_422_naming_formula_and_figure(
    client: TestClient,
) -> None:
    mid = new_id("big")
    r = client.post("/v1/models", json={"id": mid, "kind": "vaw", "dim": 100_000})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    # 16 d^2 + 16 d + 16 for VAW, the scale guard's 16 d and the 800-byte error ring (no
    # regret sums above REGRET_MAX_DIM): 149.0 GiB
    assert detail == (
        "vaw with dim 100000 needs 149.0 GiB of state (16*d^2 + 16*d + 16 bytes for the"
        " learner + 16*d + 800 bytes of running statistics); this server's budget"
        " is 256.0 MiB (ONLINEPREDICT_MAX_STATE_BYTES)"
    )
    assert client.get(f"/v1/models/{mid}").status_code == 404  # nothing stored
    assert mid not in [m["id"] for m in client.get("/v1/models").json()["models"]]


def test_the_budget_counts_the_running_statistics_too(client: TestClient) -> None:
    """The largest vaw that fits: one more feature and learner + statistics do not."""
    budget = 256 * MiB

    def total(d: int) -> int:
        return learners.state_size("vaw", d).bytes + RunningStats.state_size("regression", d).bytes

    d = max(d for d in range(3000, 5000) if total(d) <= budget)
    ok = client.post("/v1/models", json={"id": new_id("edge"), "kind": "vaw", "dim": d})
    assert ok.status_code == 201, ok.text
    r = client.post("/v1/models", json={"id": new_id("edge"), "kind": "vaw", "dim": d + 1})
    assert r.status_code == 422 and "800 bytes of running statistics" in r.json()["detail"]


def test_formula_names_the_hyperparameters_that_matter(client: TestClient) -> None:
    spec = {"kind": "dvaw-sa", "dim": 500, "params": {"horizon": 10**6}}
    r = client.post("/v1/models", json={"id": new_id("sa"), **spec})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("dvaw-sa with dim 500 needs ")
    assert "16*R*d^2" in detail and "expert rows" in detail and "levels" in detail


def test_small_models_are_still_created(client: TestClient) -> None:
    for spec in (
        {"kind": "vaw", "dim": 100},
        {"kind": "pa", "dim": 100_000},  # O(d), and no regret statistics above 256
        # O(d), no regret statistics; at its dim limit, so without its default intercept
        {"kind": "perceptron", "dim": 100_000, "preprocess": None},
        {"kind": "arow", "dim": 50_000, "params": {"diagonal": True}},
    ):
        mid = new_id(spec["kind"])  # type: ignore[arg-type]
        r = client.post("/v1/models", json={"id": mid, **spec})
        assert r.status_code == 201, r.text
        assert client.get(f"/v1/models/{mid}").status_code == 200


def test_regret_statistics_are_paid_for_up_to_their_bound_only(tiny_client: TestClient) -> None:
    """A regressor keeps the d x d regret sums up to ``REGRET_MAX_DIM`` features (the budget
    counts them); above, it keeps none and reports no regret (docs/design.md, "Metrics").
    The scale guard's 16*d is counted for every kind (service/metrics/guard.py)."""
    for dim, stats in ((REGRET_MAX_DIM, "8*d^2 + 24*d + 800"), (REGRET_MAX_DIM + 1, "16*d + 800")):
        r = tiny_client.post("/v1/models", json={"id": new_id("pa"), "kind": "pa", "dim": dim})
        assert r.status_code == 422, r.text
        assert f"(8*d bytes for the learner + {stats} bytes of running" in r.json()["detail"]


def test_a_bad_spec_keeps_its_own_message(client: TestClient) -> None:
    """The budget check validates like the build it precedes: same 422 texts."""
    for spec, needle in (
        ({"kind": "no-such-kind", "dim": 3}, "unknown kind 'no-such-kind'"),
        ({"kind": "vaw", "dim": 3, "params": {"bogus": 1}}, "unknown parameter"),
        ({"kind": "dvaw-ensemble", "dim": 5000}, "[1, 2000]"),
        ({"kind": "arow", "dim": 5000}, "use diagonal"),
    ):
        r = client.post("/v1/models", json={"id": new_id("bad"), **spec})
        assert r.status_code == 422 and needle in r.json()["detail"], r.text


def test_a_tiny_budget_refuses_even_small_models(tiny_client: TestClient) -> None:
    mid = new_id("small")
    r = tiny_client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == (
        "pa with dim 3 needs 968 bytes of state (8*d bytes for the learner + 8*d^2 + 24*d"
        " + 800 bytes of running statistics); this server's budget is 512 bytes"
        " (ONLINEPREDICT_MAX_STATE_BYTES)"
    )
    assert tiny_client.get(f"/v1/models/{mid}").status_code == 404
    r = tiny_client.post("/v1/models", json={"id": mid, "kind": "perceptron", "dim": 1})
    # its default intercept column is counted: 8 * (1 + 1) bytes for the learner (+ 16 the guard)
    assert r.status_code == 422 and "832 bytes of state" in r.json()["detail"], r.text
    assert "d = dim + 1 (intercept column)" in r.json()["detail"]
