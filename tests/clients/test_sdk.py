"""The HTTP SDK against the real API (real Redis, real broker), and its retry policy against a
small real HTTP server that answers 503 on purpose."""

from __future__ import annotations

import contextlib
import http.server
import importlib
import inspect
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from clients import AsyncClient, Client, figures
from clients.batch_answer import ANSWER_CONTENT_TYPE
from clients.errors import (
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    NotFoundError,
    UnavailableError,
    ValidationError,
    error_for_status,
)
from clients.figures import ensemble_weights, model_entry, summarize
from clients.http import RetryPolicy, _Ops
from clients.schemas import PredictResponse
from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch
from tests.clients._client_support import free_port

FAST_RETRY = RetryPolicy(attempts=3, backoff=0.01, max_backoff=0.05)


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def api(api_url: str) -> Iterator[Client]:
    with Client(api_url, api_key="", timeout=10) as client:
        yield client


@contextlib.contextmanager
def _model_of(
    api: Client, kind: str, dim: int, *, prefix: str | None = None, **spec: Any
) -> Iterator[str]:
    """A fresh model of ``kind`` for the block, deleted after; the test is skipped when
    ``learners`` or that kind is not installed."""
    learners = pytest.importorskip("learners")
    if kind not in learners.REGISTRY:
        pytest.skip(f"{kind} learner not registered")
    model = _id(prefix or f"sdk-{kind}")
    api.create_model(model, kind, dim, **spec)
    try:
        yield model
    finally:
        api.delete_model(model)


@pytest.fixture
def pa_model(api: Client) -> Iterator[str]:
    model = _id("sdk-pa")
    api.create_model(model, "pa", 3, {"variant": "pa1", "C": 0.5})
    yield model
    try:
        api.delete_model(model)
    except NotFoundError:
        pass


# --- against the real API ---------------------------------------------------------------------
def test_health_and_readiness(api: Client) -> None:
    assert api.health().ok
    ready = api.ready()
    assert ready.ok and ready.status == 200, ready.body


def test_model_lifecycle(api: Client) -> None:
    model = _id("sdk-life")
    info = api.create_model(model, "pa", 4, {"C": 2.0})
    assert (info.id, info.kind, info.dim, info.params["C"]) == (model, "pa", 4, 2.0)
    assert model in [m.id for m in api.list_models()]
    got = api.get_model(model)
    assert got.kind == "pa" and got.dim == 4
    assert got.version == 0 and got.applied == 0  # no worker has checkpointed it yet
    assert api.model_exists(model)
    with pytest.raises(ConflictError) as exc:
        api.create_model(model, "pa", 4)
    assert exc.value.status == 409
    api.delete_model(model)
    assert not api.model_exists(model)
    with pytest.raises(NotFoundError) as exc:
        api.get_model(model)
    assert exc.value.status == 404 and exc.value.message


def test_bad_spec_carries_the_constructors_message(api: Client) -> None:
    with pytest.raises(ValidationError) as exc:
        api.create_model(_id("sdk-bad"), "pa", 3, {"C": -1.0})
    assert exc.value.status == 422
    assert "C" in exc.value.message
    with pytest.raises(ValidationError) as exc:
        api.create_model(_id("sdk-bad"), "no-such-kind", 3)
    assert "no-such-kind" in exc.value.message


def test_preprocess_is_sent_with_the_spec(api: Client) -> None:
    """``create_model(preprocess=...)``: a step the kind refuses comes back as its 422."""
    with pytest.raises(ValidationError) as exc:
        api.create_model(_id("sdk-pre"), "apas", 3, preprocess={"standardize": True})
    assert exc.value.status == 422 and "portfolio weights" in exc.value.message
    with _model_of(api, "vaw", 2, preprocess={"standardize": True, "clip": 3.0}) as model:
        stored = api.get_model(model)
        assert stored.kind == "vaw" and stored.dim == 2


def test_predict_accepts_numpy_and_pandas(api: Client, pa_model: str) -> None:
    single = api.predict(pa_model, np.array([1.0, 0.0, -1.0]))
    assert isinstance(single.value, float)
    assert single.prediction_id and single.model_version == 0
    # integer column labels (a frame of an array): no names, sent as lists; a frame with
    # string columns sends names (tests/clients/test_named_features.py)
    frame = pd.DataFrame(np.array([[1.0, 2.0, 0.5], [0.0, 1.0, 0.5]]))
    batch = api.predict_batch(pa_model, frame)
    assert len(batch.predictions) == 2
    assert len({p.prediction_id for p in batch.predictions}) == 2
    series = api.predict(pa_model, frame.iloc[0])
    assert isinstance(series.value, float)


def _first_call(X: Any, **kw: Any) -> Any:
    """The request ``predict_batch`` would send first (the operation does no I/O)."""
    return next(_Ops("http://x", RetryPolicy()).predict_batch("m", X, **kw))


def test_numpy_batches_go_as_the_binary_body() -> None:
    """A numeric array, or a DataFrame with unnamed columns, is sent as the binary batch
    body (docs/events.md §7); lists and named columns as JSON; ``binary`` forces either."""
    X = np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 5.0]])  # integral: the int64 copy is equal
    for given in (X, X.astype(np.int64), pd.DataFrame(X)):
        call = _first_call(given, hints=[None, 0.5])
        assert call.json is None and call.content == encode_predict_batch(X, [None, 0.5])
        assert call.headers == {"Content-Type": PREDICT_CONTENT_TYPE, **ACCEPT_COMPACT}
    for given in (X.tolist(), pd.DataFrame(X, columns=["a", "b", "c"])):
        assert _first_call(given).content is None
        assert _first_call(given).headers == ACCEPT_COMPACT  # the compact answer, or JSON
    assert _first_call(X, binary=False).json == {"instances": X.tolist()}
    assert _first_call(X.tolist(), binary=True).content == encode_predict_batch(X)
    with pytest.raises(ValueError, match="NaN"):
        _first_call(np.array([[1.0, np.nan, 0.0]]))  # refused before sending, as for JSON


def test_a_binary_batch_predicts_as_the_json_batch(api: Client, pa_model: str) -> None:
    X = np.random.default_rng(4).normal(size=(20, 3))
    hints = [None if i % 3 else 0.25 * i for i in range(20)]
    binary = api.predict_batch(pa_model, X, hints=hints)
    as_json = api.predict_batch(pa_model, X.tolist(), hints=hints)
    assert binary.values == as_json.values and len(binary.values) == 20
    assert binary.model_version == as_json.model_version
    assert len({p.prediction_id for p in binary.predictions}) == 20
    with pytest.raises(ValidationError) as exc:
        api.predict_batch(pa_model, np.zeros((2, 4)))
    assert exc.value.status == 422 and "dimension 3" in exc.value.message


ACCEPT_COMPACT = {"Accept": f"{ANSWER_CONTENT_TYPE}, application/json;q=0.5"}


def _as_json(api: Client, model: str, X: Any) -> PredictResponse:
    """The batch asked for as JSON only (what ``predict_batch`` returned before §8)."""
    r = httpx.post(f"{api.base_url}/v1/models/{model}/predict", json={"instances": X})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    return PredictResponse.from_json(r.json())


def test_predict_batch_reads_the_compact_answer_as_the_json_one(
    api: Client, pa_model: str
) -> None:
    """Regressor and classifier: the SDK's result (from the compact answer, docs/events.md
    §8) equals the JSON answer's in every field but the (random) prediction ids."""
    X = np.random.default_rng(6).normal(size=(25, 3))
    with _model_of(api, "arow", 3) as clf:
        for model in (pa_model, clf):
            got, want = api.predict_batch(model, X), _as_json(api, model, X.tolist())
            assert got.model_version == want.model_version and got.extra == want.extra == {}
            for g, w in zip(got.predictions, want.predictions, strict=True):
                assert (g.value, g.scores, g.probabilities, g.model_version, g.extra) == (
                    w.value, w.scores, w.probabilities, w.model_version, w.extra
                )  # fmt: skip
                assert type(g.value) is type(w.value)
            batch = {p.prediction_id.split(".")[0] for p in got.predictions}  # type: ignore[union-attr]
            assert len(batch) == 1 and got.predictions[24].prediction_id.endswith(".24")  # type: ignore[union-attr]


def test_classifier_predictions_carry_class_probabilities(api: Client, pa_model: str) -> None:
    with _model_of(api, "arow", 3) as model:
        batch = api.predict_batch(model, np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 0.5]]))
        for p in batch.predictions:
            assert p.probabilities is not None and set(p.probabilities) == {"-1", "1"}
            assert sum(p.probabilities.values()) == pytest.approx(1.0)
            assert str(p.value) in p.probabilities
    assert api.predict(pa_model, [1.0, 0.0, -1.0]).probabilities is None  # a regressor


def test_wrong_dimension_is_a_validation_error(api: Client, pa_model: str) -> None:
    with pytest.raises(ValidationError) as exc:
        api.predict(pa_model, [1.0, 2.0])
    assert exc.value.status == 422 and "3" in exc.value.message
    with pytest.raises(ValueError, match="nan"):
        api.predict(pa_model, [1.0, float("nan"), 0.0])  # refused before sending


def test_events_are_accepted_with_client_ids(api: Client, pa_model: str) -> None:
    X = np.random.default_rng(0).standard_normal((25, 3))
    y = X @ np.array([1.0, -1.0, 0.5])
    got = api.send_events(pa_model, X, y)
    assert got.count == 25
    assert len(set(got.ids)) == 25
    unlabelled = api.send_events(pa_model, X[:3], ids=["u1", "u2", "u3"])
    assert unlabelled.count == 3 and unlabelled.ids == ["u1", "u2", "u3"]
    assert isinstance(api.send_event(pa_model, X[0], 1.0), str)


def test_delayed_label_joins_once(api: Client, pa_model: str) -> None:
    p = api.predict(pa_model, [0.1, 0.2, 0.3])
    first = api.label(pa_model, p.prediction_id, 0.5)
    second = api.label(pa_model, p.prediction_id, 0.5)
    assert first.get("status") == "accepted"
    assert second.get("status") == "duplicate"
    with pytest.raises(NotFoundError):
        api.label(pa_model, "no-such-prediction", 1.0)


def test_a_repeated_idempotency_key_replays_or_is_refused(api: Client, pa_model: str) -> None:
    p = api.predict(pa_model, [0.1, 0.2, 0.3])
    key = str(uuid.uuid4())
    assert api.label(pa_model, p.prediction_id, 0.5, idempotency_key=key)["status"] == "accepted"
    # repeating the call (its answer was lost, say) gets the same answer
    assert api.label(pa_model, p.prediction_id, 0.5, idempotency_key=key)["status"] == "accepted"
    with pytest.raises(ValidationError) as exc:  # the same key for another label: 422
        api.label(pa_model, p.prediction_id, -0.5, idempotency_key=key)
    assert "Idempotency-Key was used before" in exc.value.message
    # with the caller's key the API derives the ids: repeating the call repeats them
    X, batch = np.eye(3), str(uuid.uuid4())
    ids = api.send_events(pa_model, X, [1.0, 2.0, 3.0], idempotency_key=batch).ids
    assert len(set(ids)) == 3 and all(len(i) == 32 for i in ids)
    assert api.send_events(pa_model, X, [1.0, 2.0, 3.0], idempotency_key=batch).ids == ids
    with pytest.raises(ValidationError):
        api.send_events(pa_model, 2 * X, [1.0, 2.0, 3.0], idempotency_key=batch)
    one = str(uuid.uuid4())
    assert api.send_event(pa_model, X[0], 1.0, idempotency_key=one) == api.send_event(
        pa_model, X[0], 1.0, idempotency_key=one
    )
    # without one, ids are fixed by the SDK (safe to retry with any API version)
    assert api.send_events(pa_model, X, ids=["a", "b", "c"]).ids == ["a", "b", "c"]


def test_task_endpoints_refuse_other_kinds(api: Client, pa_model: str) -> None:
    with pytest.raises(ConflictError) as exc:
        api.quantify(pa_model, np.zeros((2, 3)))
    assert "quantif" in exc.value.message
    with pytest.raises(ConflictError):
        api.portfolio(pa_model)
    with pytest.raises(ConflictError):
        api.register_block(pa_model, np.eye(3))


def test_portfolio_of_an_index_tracker(api: Client) -> None:
    with _model_of(api, "apas", 3, assets=["AAA", "BBB", "CCC"]) as model:
        folio = api.portfolio(model)
        assert set(folio.weights) == {"AAA", "BBB", "CCC"}
        assert abs(sum(folio.weights.values()) - 1.0) < 1e-9  # starts on the simplex
        assert len(folio.top(2)) == 2


def test_quantify_a_quantifier(api: Client) -> None:
    with _model_of(api, "nemsis", 3) as model:
        q = api.quantify(model, np.random.default_rng(1).standard_normal((20, 3)))
        assert 0.0 <= q.prevalence <= 1.0 and q.n == 20


def test_metrics_show_the_model(api: Client, pa_model: str) -> None:
    summary = api.model_metrics(pa_model)
    assert summary["events"] == 0 and summary["rejected"] == 0
    assert f'model="{pa_model}"' in api.metrics_text()


def test_api_key(keyed_api: tuple[str, str]) -> None:
    url, key = keyed_api
    model = _id("sdk-key")
    with Client(url, api_key="", retry=FAST_RETRY) as anonymous:
        with pytest.raises(AuthenticationError) as exc:
            anonymous.create_model(model, "pa", 2)
        assert exc.value.status == 401 and "key" in exc.value.message.lower()
    with Client(url, api_key=key) as keyed:
        assert keyed.create_model(model, "pa", 2).id == model
        keyed.delete_model(model)


async def test_async_client(api_url: str, workers: Any) -> None:
    model = _id("sdk-async")
    async with AsyncClient(api_url, api_key="") as api:
        assert (await api.health()).ok
        await api.create_model(model, "pa", 2)
        try:
            pred = await api.predict(model, np.array([1.0, 2.0]))
            assert pred.prediction_id
            got = await api.send_events(model, np.eye(2), [1.0, -1.0])
            assert got.count == 2
            assert await api.model_exists(model)
            # the session's workers learn them (the test asserted 0 here, which held only
            # while no earlier test had started the workers and the checkpoint was late)
            assert await api.wait_processed(model, 2) == 2
            assert await api.processed(model) == 2
            with pytest.raises(ValidationError):
                await api.predict(model, [1.0])
        finally:
            await api.delete_model(model)
        assert not await api.model_exists(model)


# --- one implementation, two faces -------------------------------------------------------------
LIFECYCLE = {"close", "aclose"}  # plus the (async) context manager methods


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(cls, name))
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name)) and name not in LIFECYCLE
    }


def test_both_clients_have_the_same_methods_and_parameters() -> None:
    sync, aio = _public(Client), _public(AsyncClient)
    assert sync.keys() == aio.keys()
    assert sync == aio  # the same parameters, defaults and annotations
    for name in aio:
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name
    assert {"wait_processed", "processed", "model_metrics", "wait_ready"} <= sync.keys()
    assert "on_progress" in sync["wait_processed"].parameters


async def test_the_async_client_reports_progress_too(api_url: str) -> None:
    seen: list[int] = []
    async with AsyncClient(api_url, api_key="") as api:
        model = _id("sdk-progress")
        await api.create_model(model, "pa", 2)
        try:
            assert await api.wait_processed(model, 0, on_progress=seen.append) == 0
        finally:
            await api.delete_model(model)
    assert seen == [0]


# --- retries, against a real HTTP server that answers 503 on purpose ---------------------------
class _Flaky(http.server.BaseHTTPRequestHandler):
    failures = 0  # 503 answers before a 200
    hits: list[str] = []
    keys: list[str | None] = []  # the Idempotency-Key header of each request

    def _answer(self) -> None:
        type(self).hits.append(self.command)
        type(self).keys.append(self.headers.get("Idempotency-Key"))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if len(type(self).hits) <= type(self).failures:
            body, code = b'{"detail": "redis unavailable"}', 503
        else:
            body, code = json.dumps({"models": []}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[tuple[str, type[_Flaky]]]:
    handler = type("Flaky", (_Flaky,), {"hits": [], "keys": [], "failures": 2})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_idempotent_calls_retry_on_503(flaky: tuple[str, type[_Flaky]]) -> None:
    url, handler = flaky
    with Client(url, retry=FAST_RETRY) as api:
        assert api.list_models() == []
    assert handler.hits == ["GET", "GET", "GET"]


def test_retries_give_up_with_the_servers_message(flaky: tuple[str, type[_Flaky]]) -> None:
    url, handler = flaky
    handler.failures = 10
    with Client(url, retry=FAST_RETRY) as api, pytest.raises(UnavailableError) as exc:
        api.list_models()
    assert exc.value.status == 503 and exc.value.message == "redis unavailable"
    assert len(handler.hits) == FAST_RETRY.attempts


def test_events_and_labels_carry_one_idempotency_key_over_their_retries(
    flaky: tuple[str, type[_Flaky]],
) -> None:
    url, handler = flaky
    with Client(url, retry=FAST_RETRY) as api:
        api.send_events("m", np.eye(2), [1.0, 2.0])  # two 503s, then the 200
        first = handler.keys[:3]
        handler.failures = 0
        api.send_event("m", [1.0, 0.0], 1.0)
        api.label("m", "p1", 1.0)
        api.label("m", "p1", 1.0, idempotency_key='my "key"')
    assert handler.hits == ["POST"] * 6
    assert first[0] is not None and first == [first[0]] * 3  # one key for the call's tries
    assert first[0].startswith('"') and first[0].endswith('"')  # the draft's sf-string
    generated = handler.keys[:5]
    assert len({generated[0], *generated[3:5]}) == 3  # a new key per call
    assert handler.keys[5] == '"my \\"key\\""'  # the caller's key, escaped


def test_a_chunked_call_sends_one_key_per_chunk(flaky: tuple[str, type[_Flaky]]) -> None:
    from clients.http import EVENTS_CHUNK

    url, handler = flaky
    handler.failures = 0
    with Client(url, retry=FAST_RETRY) as api:
        api.send_events("m", np.zeros((2 * EVENTS_CHUNK + 1, 2)), idempotency_key="k")
        api.send_events("m", np.zeros((3, 2)), idempotency_key="k1")
    assert handler.keys == ['"k/0"', '"k/1"', '"k/2"', '"k1"']


async def test_the_async_client_sends_the_key_too(flaky: tuple[str, type[_Flaky]]) -> None:
    url, handler = flaky
    async with AsyncClient(url, retry=FAST_RETRY) as api:
        await api.label("m", "p1", 1.0)
        await api.send_events("m", np.eye(2), idempotency_key="given")
    assert handler.keys[0] is not None and handler.keys[:3] == [handler.keys[0]] * 3
    assert handler.keys[3] == '"given"'


def test_model_creation_is_not_retried(flaky: tuple[str, type[_Flaky]]) -> None:
    url, handler = flaky
    with Client(url, retry=FAST_RETRY) as api, pytest.raises(UnavailableError):
        api.create_model("m", "pa", 2)
    assert handler.hits == ["POST"]


def test_connection_errors_are_retried_then_raised() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", retry=FAST_RETRY) as api:
        with pytest.raises(ConnectionFailedError) as exc:
            api.list_models()
    assert exc.value.status is None


def test_error_classes_by_status() -> None:
    detail = [{"loc": ["body", "dim"], "msg": "Input should be greater than 0"}]
    err = error_for_status(422, {"detail": detail})
    assert isinstance(err, ValidationError) and err.message == "dim: Input should be greater than 0"
    assert type(error_for_status(401, {"detail": "no key"})) is AuthenticationError
    assert error_for_status(502, "bad gateway").message == "bad gateway"


def test_metrics_summary_reads_the_json_feed() -> None:
    body = {
        "models": [
            {"id": "r", "kind": "pa", "counters": {"applied": 4, "duplicate": 1, "rejected": 0},
             "figures": {"cumulative_loss": 16.0, "cumulative_regret": -2.5},
             "diagnostics": {"epsilon": 1e-4}},
            {"id": "c", "kind": "arow", "counters": {"applied": 10, "duplicate": 0, "rejected": 0},
             "figures": {"mistakes": 3, "rmse_window": 9.0},
             "diagnostics": {"weight_0": 0.25, "weight_1": 0.75, "prevalence_cc": 0.4}},
        ]
    }  # fmt: skip
    r = summarize(model_entry(body, "r"))
    assert r["events"] == 4 and r["duplicates"] == 1 and r["rejected"] == 0
    assert r["cumulative_regret"] == -2.5
    assert r["rmse"] == pytest.approx(2.0)  # no rmse reported: sqrt(16 / 4)
    c_entry = model_entry(body, "c")
    c = summarize(c_entry)
    assert c["mistakes"] == 3 and c["error_rate"] == pytest.approx(0.3) and "rmse" not in c
    assert c["prevalence_estimate"] == 0.4
    assert ensemble_weights(c_entry) == {"0": 0.25, "1": 0.75}
    unknown = summarize(model_entry(body, "nope"))
    assert unknown["events"] is None and unknown["cumulative_loss"] is None


def test_metrics_json_and_exposition_agree(api: Client, pa_model: str) -> None:
    entry = api.model_snapshot(pa_model)  # no event sent: the counters stay where they are
    assert entry["id"] == pa_model and entry["version"] == 0
    assert entry["listed"] and entry["kind"] == "pa"
    from prometheus_client.parser import text_string_to_metric_families

    exposed = {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(api.metrics_text())
        for s in family.samples
        if s.name == "onlinepredict_events_total" and s.labels.get("model") == pa_model
    }
    assert exposed == {o: float(n) for o, n in entry["counters"].items()} == {
        "applied": 0.0, "duplicate": 0.0, "rejected": 0.0
    }  # fmt: skip


def test_register_a_block_of_a_transductive_learner(api: Client) -> None:
    with _model_of(api, "transductive", 2, prefix="sdk-trans") as model:
        got = api.register_block(model, np.random.default_rng(2).standard_normal((5, 2)), id="b1")
        assert got["event_id"] == "b1" and got["T"] == 5


def test_the_old_module_name_clients_metrics_still_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """``clients.metrics`` (the module's old name) re-exports ``clients.figures``, with a
    DeprecationWarning."""
    import sys

    monkeypatch.delitem(sys.modules, "clients.metrics", raising=False)
    with pytest.warns(DeprecationWarning, match=r"clients\.figures"):
        old = importlib.import_module("clients.metrics")
    for name in old.__all__:
        assert getattr(old, name) is getattr(figures, name)
