"""The SDK with named features (docs/events.md §1): dicts, pandas rows and DataFrames go as
objects ``{name: value}``, arrays as lists, against the real API and real workers; what the
workers learn is the same either way."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from clients import AsyncClient, Client
from clients._vectors import as_matrix, as_vector
from clients.errors import ValidationError
from clients.producer import EventProducer, make_event
from tests.clients._client_support import cli

FEATURES = ["a", "b", "c"]
W = np.array([1.0, -2.0, 0.5])


@pytest.fixture
def api(api_url: str) -> Iterator[Client]:
    with Client(api_url, api_key="", timeout=10) as client:
        yield client


def _model(api: Client, **spec: Any) -> str:
    model = f"sdk-nf-{uuid.uuid4().hex[:8]}"
    api.create_model(model, "pa", 3, {"C": 1.0}, **spec)
    return model


def test_vectors_keep_names_of_dicts_and_pandas_objects() -> None:
    frame = pd.DataFrame({"a": [1.0, 0.0], "b": [2, 1], "c": [0.5, np.float32(0.25)]})
    assert as_vector(frame.iloc[0]) == {"a": 1.0, "b": 2.0, "c": 0.5}
    assert as_vector(frame.iloc[[1]]) == {"a": 0.0, "b": 1.0, "c": 0.25}  # a one-row frame
    assert as_matrix(frame) == [{"a": 1.0, "b": 2.0, "c": 0.5}, {"a": 0.0, "b": 1.0, "c": 0.25}]
    assert as_vector({"b": np.float64(2.0)}) == {"b": 2.0}
    unnamed = pd.DataFrame(np.eye(2))  # integer labels: lists, as before
    assert as_matrix(unnamed) == [[1.0, 0.0], [0.0, 1.0]]
    assert as_vector(unnamed.iloc[0]) == [1.0, 0.0]
    assert as_vector(np.array([1, 2])) == [1.0, 2.0]
    with pytest.raises(ValueError, match="nan"):
        as_vector({"a": float("nan")})
    with pytest.raises(ValueError, match="strings"):
        as_vector({1: 2.0})


def test_make_event_carries_an_object_x() -> None:
    row = pd.Series({"c": 3.0, "a": 1.0})
    assert make_event("m", row, 1.0, id="e", ts=0.0)["x"] == {"c": 3.0, "a": 1.0}


def test_create_with_features_and_the_earlier_assets(api: Client) -> None:
    named = _model(api, features=FEATURES)
    assert api.get_model(named).features == FEATURES
    old = _model(api, assets=FEATURES)
    info = api.get_model(old)
    assert info.features == FEATURES and info.assets == FEATURES
    with pytest.raises(ValueError, match="differ"):
        _model(api, features=FEATURES, assets=["c", "b", "a"])


def test_named_inputs_predict_as_the_list(api: Client) -> None:
    model = _model(api, features=FEATURES)
    x = np.array([0.5, -1.0, 2.0])
    want = api.predict(model, x).value
    frame = pd.DataFrame([x, x], columns=FEATURES)
    assert api.predict(model, dict(zip(FEATURES, x, strict=True))).value == want
    assert api.predict(model, frame.iloc[0]).value == want
    assert api.predict_batch(model, frame).values == [want, want]
    assert api.predict(model, {"a": 0.5}).value == api.predict(model, [0.5, 0.0, 0.0]).value
    with pytest.raises(ValidationError, match="unknown features 'zz'"):
        api.predict(model, {"a": 1.0, "zz": 2.0})
    unnamed = _model(api)
    with pytest.raises(ValidationError, match="no feature names"):
        api.predict_batch(unnamed, frame)


def test_events_from_a_dataframe_learn_as_the_array(api: Client, workers: Any) -> None:
    X = np.random.default_rng(5).standard_normal((50, 3))
    X[::4, 2] = 0.0
    y = [float(row @ W) for row in X]
    by_frame, by_array = _model(api, features=FEATURES), _model(api, features=FEATURES)
    frame = pd.DataFrame(X, columns=FEATURES)
    api.send_events(by_frame, frame, y)
    api.send_events(by_array, X, y)
    assert api.wait_processed(by_frame, 50, timeout=60) == 50
    assert api.wait_processed(by_array, 50, timeout=60) == 50
    probe = [0.3, 0.7, -1.1]
    assert api.predict(by_frame, probe).value == api.predict(by_array, probe).value


async def test_producer_and_async_client_with_named_rows(
    api_url: str, client_settings: Any, workers: Any
) -> None:
    X = np.random.default_rng(6).standard_normal((30, 3))
    y = [float(row @ W) for row in X]
    frame = pd.DataFrame(X, columns=FEATURES)
    async with AsyncClient(api_url, api_key="", timeout=10) as api:
        by_kafka = f"sdk-nf-k-{uuid.uuid4().hex[:8]}"
        by_list = f"sdk-nf-l-{uuid.uuid4().hex[:8]}"
        infos = [await api.create_model(m, "pa", 3, features=FEATURES) for m in (by_kafka, by_list)]
        async with EventProducer(
            client_settings.kafka_bootstrap,
            topic=client_settings.events_topic,
            partitions={i.id: i.partition for i in infos},
        ) as producer:
            await producer.send_many(by_kafka, frame, y)
            await producer.send_many(by_list, X, y)
        assert await api.wait_processed(by_kafka, 30, timeout=60) == 30
        assert await api.wait_processed(by_list, 30, timeout=60) == 30
        probe = {"b": 1.0}
        got = await asyncio.gather(api.predict(by_kafka, probe), api.predict(by_list, probe))
        assert got[0].value == got[1].value
        assert json.dumps(got[0].value)  # a plain float


def test_cli_creates_with_features_and_predicts_a_named_vector(
    api: Client, cli_env: dict[str, str], tmp_path: Any
) -> None:
    model = f"cli-nf-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"id": model, "kind": "pa", "dim": 3, "features": FEATURES}))
    assert cli("models", "create", "-f", str(spec), env=cli_env).returncode == 0
    assert api.get_model(model).features == FEATURES
    named = cli("predict", model, '{"c": 2.0, "a": 1.0}', "--json", env=cli_env)
    listed = cli("predict", model, "1", "0", "2", "--json", env=cli_env)
    assert named.returncode == 0, named.stderr
    values = [json.loads(r.stdout)["predictions"][0]["value"] for r in (named, listed)]
    assert values[0] == values[1]
    unknown = cli("predict", model, '{"zz": 1}', env=cli_env)
    assert unknown.returncode != 0 and "unknown features 'zz'" in unknown.stdout + unknown.stderr
