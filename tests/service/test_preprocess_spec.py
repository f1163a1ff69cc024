"""``preprocess`` in the model spec over HTTP: stored as given, the kind's declared default
when omitted (arow: an intercept), none when null; refusals and bad options are a 422."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

import learners
from service.config import Settings

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings()  # ``client`` (tests/service/conftest.py) serves these


def create(client: TestClient, **spec: object) -> dict:  # type: ignore[type-arg]
    mid = f"pre-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/models", json={"id": mid, **spec})
    assert r.status_code == 201, r.text
    got = client.get(f"/v1/models/{mid}")
    assert got.status_code == 200
    return got.json()  # type: ignore[no-any-return]


def test_omitted_preprocess_is_the_kinds_declared_default(client: TestClient) -> None:
    for kind in ("arow", "perceptron"):
        assert learners.REGISTRY[kind].preprocess_default == {"intercept": True}
        got = create(client, kind=kind, dim=3)["preprocess"]
        assert got == {"standardize": False, "clip": None, "intercept": True}
    assert create(client, kind="pa", dim=3)["preprocess"] is None
    assert create(client, kind="transductive-logistic", dim=3)["preprocess"] is None
    assert create(client, kind="arow", dim=3, preprocess=None)["preprocess"] is None  # paper's
    # learners.build never applies it: reproductions build the bare learner
    assert type(learners.build("arow", 3)) is learners.REGISTRY["arow"]


def test_given_preprocess_is_stored_and_served(client: TestClient) -> None:
    pre = {"standardize": True, "clip": 2.5, "intercept": True}
    model = create(client, kind="vaw", dim=2, preprocess=pre)
    assert model["preprocess"] == pre
    # nothing learned yet: the fresh wrapped learner predicts (standardised x is 0 -> 0.0)
    r = client.post(f"/v1/models/{model['id']}/predict", json={"x": [1e6, -3.0]})
    assert r.status_code == 200, r.text
    assert (
        r.json()["predictions"][0]["value"]
        == learners.build("vaw", 2, preprocess=pre).predict([1e6, -3.0]).value
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"kind": "apas", "preprocess": {"intercept": True}}, "portfolio weights on raw returns"),
        ({"kind": "transductive", "preprocess": {"clip": 1.0}}, "registered block"),
        ({"kind": "nemsis", "preprocess": {"intercept": True}}, "fit_intercept"),
        ({"kind": "pa", "preprocess": {"clip": 0}}, "greater than 0"),
        ({"kind": "pa", "preprocess": {"scale": True}}, "Extra inputs are not permitted"),
        ({"kind": "pa", "preprocess": {"standardize": "yes"}}, "valid boolean"),  # not coerced
        ({"kind": "perceptron", "dim": 100_000}, "no room for the intercept column"),
    ],
)
def test_a_refused_or_bad_preprocess_is_a_readable_422(
    client: TestClient,
    spec: dict,
    words: str,  # type: ignore[type-arg]
) -> None:
    body = {"id": f"pre-bad-{uuid.uuid4().hex[:8]}", "dim": 3, **spec}
    r = client.post("/v1/models", json=body)
    assert r.status_code == 422, r.text
    assert words in r.text


def test_the_fault_boundary_sees_a_non_finite_value_inside_the_wrapped_learner() -> None:
    from service.worker.undo import Undo, UnsafeState, check_finite

    model = learners.build("pa", 2, preprocess={"standardize": True, "intercept": True})
    model.learn([1.0, 2.0], 1.0)
    stats = _NoStats()
    undo = Undo(model, stats)
    check_finite(undo, model, stats)  # all finite: passes
    model.inner.w_[0] = float("nan")  # type: ignore[attr-defined]
    with pytest.raises(UnsafeState, match="'w_'"):
        check_finite(undo, model, stats)
    assert np.isfinite(undo.learner.inner.w_).all()  # the snapshot holds its own copy


class _NoStats:
    regret = None


def test_openapi_describes_preprocess_and_each_kinds_default(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    pre = schema["PreprocessSpec"]
    assert set(pre["properties"]) == {"standardize", "clip", "intercept"}
    assert pre["additionalProperties"] is False
    clip = next(a for a in pre["properties"]["clip"]["anyOf"] if a.get("type") == "number")
    assert clip["exclusiveMinimum"] == 0
    assert schema["ArowSpec"]["properties"]["preprocess"]["default"] == {"intercept": True}
    assert schema["PaSpec"]["properties"]["preprocess"].get("default") is None


def test_the_state_budget_counts_the_standardisation_statistics(make_settings) -> None:  # type: ignore[no-untyped-def]
    from service.api.errors import InvalidInput
    from service.api.routes.models import check_state_budget
    from service.api.schemas import ModelSpec

    pre = {"standardize": True, "intercept": True}
    spec = ModelSpec.model_validate({"id": "b", "kind": "pa", "dim": 300, "preprocess": pre})
    need = learners.state_size("pa", 300, {}, pre).bytes
    assert need == 8 * 301 + 16 * 300
    with pytest.raises(InvalidInput, match="standardisation statistics"):
        check_state_budget(spec, make_settings(max_state_bytes=need))  # + running statistics
