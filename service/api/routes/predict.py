"""Predictions from the latest checkpoint; each is stored (x, hint) for a later label.

This is the API's hot path, kept lean after profiling (``benchmarks/predict.py``,
``benchmarks/README.md``):

* a plain request (a JSON object with numbers only: ``x`` with an optional ``hint``, or
  ``instances`` with optional ``hints``; vectors as lists, not objects) takes a fast path
  (``PredictRoute``): parsed by orjson and checked by hand, without FastAPI's
  request/dependency/pydantic machinery, which cost several times the rest of the request.
  Anything else (bad input, strings or booleans for numbers, named x, another content
  type, dependency overrides) goes through the ordinary FastAPI handler below, so every
  error keeps its status, shape and message, and the OpenAPI schema still documents
  ``PredictRequest``/``PredictResponse``;
* a batch may come as a binary body instead (``application/vnd.onlinepredict.batch``,
  docs/events.md §7: the n x d float64 block after a 16-byte header), read by
  ``service.api.batch_body`` as one numpy view: no JSON to parse or to prove plain, and
  served exactly as the same rows sent as ``instances``;
* one Redis round trip (``RedisAccess.store_checked_predictions`` over the pipelined
  connection of ``service.api.redis_pipe``): the checkpoint version is read and the
  predictions are stored in one script, provided the stored spec is the one this process
  checked the request against (``SpecMemo``; otherwise the script returns the stored spec
  and stores nothing);
* the rows are stored as one record per request (ids ``<batch>.<row>``,
  ``clients.batch_answer``), not one hash per row;
* the learner is cached per checkpoint write token (``ModelCache``); the response is
  serialised once with orjson, or, when the client asks for it, written as the compact
  answer (docs/events.md §8, ``service.api.batch_answer``): columns, one batch id.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from itertools import chain
from typing import Any, cast

import numpy as np
import orjson
from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from clients.batch_answer import ANSWER_CONTENT_TYPE, prediction_ids
from clients.wire import PREDICT_CONTENT_TYPE
from learners import Prediction
from learners.base import Unanswerable
from service.api.batch_answer import compact_answer, values_answer, wants_compact
from service.api.batch_body import decode_predict_batch
from service.api.cost import check_cost
from service.api.deps import CacheDep, ModelIdPath, get_model
from service.api.errors import InvalidInput
from service.api.middleware import replay_body
from service.api.redis_access import RedisAccess
from service.api.routes._common import check_vectors, dense_rows, errors, jsonable
from service.api.schemas import ModelSpec, PredictRequest, PredictResponse
from service.api.security import PredictKey, check_predict_key
from service.api.serving import KnownSpec, ModelCache, SpecMemo
from service.config import Settings

THREAD_BATCH = 256  # larger batches run off the event loop
SPEC_RETRIES = 3  # a spec that changes under every attempt: store without the check
_NUMBER = {float, int}  # bool is neither (type() is exact): booleans take the slow path


def _fits(
    spec: ModelSpec, rows: Sequence[Sequence[float]], X: np.ndarray | None, settings: Settings
) -> bool:
    if len(rows) > settings.max_batch:
        return False
    return X.shape[1] == spec.dim if X is not None else all(len(r) == spec.dim for r in rows)


def _matrix(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """The rows (numbers, each of the spec's dimension) as one float64 matrix."""
    return np.array(rows, dtype=np.float64)


def _value(v: Any) -> Any:
    return v if type(v) is float and math.isfinite(v) else jsonable(v)


async def serve_predictions(
    request: Request,
    model_id: str,
    rows: Sequence[Sequence[float]],
    hints: Sequence[float | None],
    what: str,
    cache: ModelCache,
    X: np.ndarray | None = None,
) -> Response:
    """Check the rows against the model's stored spec, store them for their labels (one
    round trip in the steady state), predict, answer. ``rows`` hold numbers only; ``X``,
    when given, is them as a float64 matrix already."""
    settings: Settings = request.app.state.settings
    store: RedisAccess = request.state.store
    specs: SpecMemo = request.state.specs
    compact = wants_compact(request.headers.get("accept"))  # a 422 before storing anything
    batch = os.urandom(16).hex()  # the predictions' ids are <batch>.<row>
    known: KnownSpec | None = specs.get(model_id)
    # A request that does not fit the spec this process knows is checked against the stored
    # one (it may have changed): ask for it without storing anything.
    sha1 = known.sha1 if known is not None and _fits(known.spec, rows, X, settings) else ""
    for _ in range(SPEC_RETRIES):
        if sha1 and known is not None:  # the cost budget, before storing or predicting
            check_cost(known.spec, len(rows), settings.max_request_cost)
        if sha1 and X is None:  # built once the rows fit the spec (not ragged)
            X = _matrix(rows)
        res = await store.store_checked_predictions(
            model_id, sha1, batch, X, hints, settings.prediction_ttl_s
        )
        if res is None:
            specs.forget(model_id)
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no model with id {model_id!r}")
        version, token, raw = res
        if raw is None:
            break
        known = specs.learn(model_id, raw)
        check_vectors(known.spec, rows, settings, what)  # 422 against the stored spec
        sha1 = known.sha1
    else:  # pragma: no cover - the spec changed under each of SPEC_RETRIES round trips
        sha1 = ""
        if known is not None:
            check_cost(known.spec, len(rows), settings.max_request_cost)
        X = _matrix(rows) if X is None else X
    assert known is not None and X is not None
    spec = known.spec
    served = await cache.get(spec, version, token)
    if not sha1 or served.version != version:
        # The checkpoint moved between the two reads (or the spec kept changing): store the
        # predictions with the version that actually serves them.
        await store.save_predictions(
            model_id, batch, X, hints, served.version, settings.prediction_ttl_s
        )
    learner = served.learner
    # the compact answer of a compiled linear regressor needs its values only: one array,
    # no Prediction per row (~13% of the route's CPU for 100 rows)
    values_of = getattr(learner, "predict_values", None) if compact else None

    def run() -> tuple[Any, list | None]:  # type: ignore[type-arg]
        # predict() changes no state (learner contract), so sharing the cached learner is safe;
        # predict_many validates the rows as one matrix (the same predictions as the loop);
        # classifiers add their class probabilities, one call for the batch
        if values_of is not None and (values := values_of(X, hints=hints)) is not None:
            return values, None
        preds = learner.predict_many(X, hints=hints)
        if learner.task != "classification":
            return preds, None
        return preds, learner.predict_proba_many(X, hints=hints)

    try:
        preds, probas = run() if len(rows) < THREAD_BATCH else await run_in_threadpool(run)
    except Unanswerable as exc:  # e.g. a transductive model asked outside its block
        raise InvalidInput(f"model {model_id!r} cannot predict these rows: {exc}") from None
    check_finite_predictions(model_id, preds, X, what)
    if type(preds) is np.ndarray:
        return Response(values_answer(preds, batch, served.version), media_type=ANSWER_CONTENT_TYPE)
    if compact and (body := compact_answer(preds, probas, batch, served.version)) is not None:
        return Response(body, media_type=ANSWER_CONTENT_TYPE)
    ids = prediction_ids(batch, len(rows))
    payload = {"predictions": _outputs(preds, ids, probas), "model_version": served.version}
    return Response(orjson.dumps(payload), media_type="application/json")


def check_finite_predictions(
    model_id: str, preds: np.ndarray | Sequence[Prediction], X: np.ndarray, what: str
) -> None:
    """``InvalidInput`` (a 422 that says why) when a prediction or score is not finite: the
    row's scale is beyond what the model can answer (JSON has no inf; ``null`` would read as
    an answer). Cheap when all is well: one sum of the values (finite sum, finite terms)."""
    if type(preds) is np.ndarray:
        if math.isfinite(float(preds.sum())):
            return
        bad = next(i for i, v in enumerate(preds.tolist()) if not math.isfinite(v))
        value: Any = preds[bad]
    else:
        values = [p.value for p in preds]
        numeric = all(type(v) is float for v in values)
        if numeric and math.isfinite(sum(values)) and all(p.scores is None for p in preds):
            return
        bad = next((i for i, p in enumerate(preds) if not _finite_prediction(p)), -1)
        if bad < 0:
            return
        value = preds[bad].value
    row = X[bad]
    big = float(np.abs(row).max()) if row.size else 0.0
    where = "" if what == "x" else f" for row {bad}"
    raise InvalidInput(
        f"model {model_id!r}: the prediction{where} is not finite ({value}): the input's"
        f" largest |x| is {big:.3g}, beyond the scale this model can answer in floating point;"
        ' send values on the scale it learned (docs/reliability.md, "The guard")'
    )


def _finite_prediction(p: Prediction) -> bool:
    v = p.value
    if isinstance(v, float | np.floating) and not math.isfinite(v):
        return False
    return not p.scores or all(math.isfinite(float(s)) for s in p.scores.values())


def _outputs(preds: Sequence[Prediction], ids: Sequence[str], probas: list | None) -> list:  # type: ignore[type-arg]
    """The response's predictions. Plain regressor values (floats, no scores), finite as
    their sum proves, go out as they are; anything else through ``_value``/``jsonable``."""
    if probas is None and all(p.scores is None and type(p.value) is float for p in preds):
        values = [p.value for p in preds]
        if math.isfinite(sum(values)):
            return [
                {"value": v, "prediction_id": pid, "scores": None}
                for v, pid in zip(values, ids, strict=True)
            ]
    out = [
        {
            "value": _value(p.value),
            "prediction_id": pid,
            "scores": jsonable(dict(p.scores)) if p.scores else None,
        }
        for p, pid in zip(preds, ids, strict=True)
    ]
    if probas is not None:
        for item, proba in zip(out, probas, strict=True):
            item["probabilities"] = {str(c): float(q) for c, q in proba.items()}
    return out


def _number_matrix(body: Any, raw: bytes) -> np.ndarray | None:
    """A parsed body's ``instances`` as a finite float64 matrix when the raw bytes prove
    every value in them a JSON number, without a Python pass over each number: no string
    but the keys (two quotes per top-level key), no ``true``/``false`` (no 'r' or 'f'
    byte, which none of the keys has), one 2-D float64 matrix for numpy (a nested list or
    ragged rows raise, a null becomes NaN) and every value finite. None: not proven, and
    the passes over the values decide as before."""
    if type(body) is not dict:
        return None
    rows = body.get("instances")
    if type(rows) is not list or not rows or not all(type(r) is list for r in rows):
        return None
    if _quotes_beyond(raw, 2 * len(body)) or b"r" in raw or b"f" in raw:
        return None
    try:
        X = np.array(rows, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    if X.ndim != 2 or not np.isfinite(X).all():
        return None
    return X


def _quotes_beyond(raw: bytes, n: int) -> bool:
    """Whether ``raw`` holds other than ``n`` double quotes, by n + 1 finds (memchr): ~0.5 us
    over a 20 KB body, where ``bytes.count`` takes ~5 us."""
    i = -1
    for _ in range(n):
        i = raw.find(b'"', i + 1)
        if i < 0:
            return True
    return raw.find(b'"', i + 1) >= 0


def _plain_rows(
    body: Any, numbers: bool = False
) -> tuple[list[list[float | int]], list[float | None], str] | None:
    """(rows, hints, what) when the parsed body is a plain, valid request whose every value
    is a JSON number (what ``PredictRequest`` accepts without converting anything but int
    to float); None for anything else, which the FastAPI handler then validates.
    ``numbers``: the instances are known to be numbers (``_number_matrix``)."""
    if type(body) is not dict:
        return None
    if "x" in body:
        x = body["x"]
        hint = body.get("hint")
        if len(body) > 1 + ("hint" in body) or type(x) is not list or not x:
            return None
        if not set(map(type, x)) <= _NUMBER:
            return None
        if hint is not None:
            if type(hint) not in _NUMBER or not math.isfinite(hint):
                return None
            hint = float(hint)
        return [x], [hint], "x"
    rows = body.get("instances")
    hints = body.get("hints")
    if type(rows) is not list or not rows or len(body) > 1 + ("hints" in body):
        return None
    if not numbers:
        if not all(type(r) is list for r in rows):
            return None
        if not set(map(type, chain.from_iterable(rows))) <= _NUMBER:
            return None
    if hints is None:
        return rows, [None] * len(rows), "instances"
    if type(hints) is not list or len(hints) != len(rows):
        return None
    if not set(map(type, hints)) <= {float, int, type(None)}:
        return None
    out = [None if h is None else float(h) for h in hints]
    if not all(h is None or math.isfinite(h) for h in out):
        return None
    return rows, out, "instances"


def _is_media(content_type: str | None, media: str) -> bool:
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == media


def _is_json(content_type: str | None) -> bool:
    return _is_media(content_type, "application/json")


class PredictRoute(APIRoute):
    """The predict route with a fast path for plain requests (see the module docstring).
    Anything else is handed, body included, to FastAPI's own handling of this route, so
    behaviour and documentation are those of the endpoint function below. Exceptions of
    the fast path propagate to the application's exception handlers, as FastAPI's do."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await super().handle(scope, receive, send)
            return
        request = Request(scope, receive, send)
        if _is_media(request.headers.get("content-type"), PREDICT_CONTENT_TYPE):
            await self._handle_binary(request, scope, receive, send)
            return
        if scope["app"].dependency_overrides:
            await super().handle(scope, receive, send)
            return
        check_predict_key(request)  # before the body is read: a stranger costs no parsing
        body = await request.body()
        parsed = _plain_request(request, body)
        if parsed is None:
            await super().handle(scope, replay_body(body, receive), send)
            return
        rows, hints, what, X = parsed
        model_id = scope["path_params"]["model_id"]
        cache = request.state.cache
        response = await serve_predictions(request, model_id, rows, hints, what, cache, X)
        await response(scope, receive, send)

    async def _handle_binary(
        self, request: Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A binary batch body (docs/events.md §7): the rows as one float64 block, checked
        by ``decode_predict_batch`` (422 for any fault), then served as the same rows sent as
        JSON ``instances``. With dependency overrides (tests), it is handed to FastAPI's
        handler as that JSON body, so the overrides apply as for JSON."""
        overridden = bool(scope["app"].dependency_overrides)
        if not overridden:  # (with overrides FastAPI's handler checks the key)
            check_predict_key(request)  # a 401 before the body is read, as for JSON
        body = await request.body()
        X, hints = decode_predict_batch(body, request.app.state.settings.max_batch)
        if overridden:
            as_json = orjson.dumps({"instances": X.tolist(), "hints": hints})
            await super().handle(_as_json_scope(scope), replay_body(as_json, receive), send)
            return
        model_id = scope["path_params"]["model_id"]
        rows = cast(Sequence[Sequence[float]], X)  # an (n, d) array reads as its rows
        response = await serve_predictions(
            request, model_id, rows, hints, "instances", request.state.cache, X
        )
        await response(scope, receive, send)


def _as_json_scope(scope: Scope) -> Scope:
    """``scope`` with its body declared JSON (no Content-Length: the body is a new one)."""
    drop = (b"content-type", b"content-length")
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in drop]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def _plain_request(
    request: Request, body: bytes
) -> tuple[list[list[float | int]], list[float | None], str, np.ndarray | None] | None:
    """``_plain_rows`` of a JSON body whose numbers are all finite, and the instances as a
    matrix when ``_number_matrix`` proves them plain; None: not plain."""
    if not _is_json(request.headers.get("content-type")):
        return None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    X = _number_matrix(obj, body)
    parsed = _plain_rows(obj, numbers=X is not None)
    if parsed is None:
        return None
    # All finite as well (orjson reads no NaN/Infinity and refuses 1e999 today; checked
    # anyway, cheaply): a finite sum proves every number finite (an inf or NaN makes it inf
    # or NaN); an overflowing sum of finite numbers leaves it to the exact pass.
    if X is None and not math.isfinite(sum(chain.from_iterable(parsed[0]))):
        if not all(map(math.isfinite, chain.from_iterable(parsed[0]))):
            return None
    return (*parsed, X)


router = APIRouter(prefix="/v1/models", tags=["predict"], route_class=PredictRoute)

BINARY_BATCH_DOC = {
    "schema": {"type": "string", "format": "binary"},
    "description": (
        "A batch as one float64 block (docs/events.md §7): header '<4sBBHII' (magic"
        " b'\\x93OPB', version 1, flags bit 0 = hints block, reserved 0, n, d), then"
        " X (n x d, row-major), then n hints when flags bit 0 (NaN = no hint); little-endian."
    ),
}


COMPACT_ANSWER_DOC = {
    "description": (
        "With `Accept: application/vnd.onlinepredict.predictions`: the predictions as columns"
        " (docs/events.md §8): header '<4sBBHIIIIQ16s' (magic b'\\x93OPP', version 1, flags,"
        " reserved 0, n, k, s, meta bytes, model_version, batch id), a JSON meta section,"
        " then n values (float64, or int64 label indices), n x k probabilities, n x s"
        " scores; little-endian. Prediction ids are '<batch id hex>.<row>'."
    ),
    "content": {ANSWER_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}},
}


@router.post(
    "/{model_id}/predict",
    response_model=PredictResponse,
    dependencies=[PredictKey],
    responses={200: COMPACT_ANSWER_DOC, **errors(401, 404, 413, 422, 503)},
    openapi_extra={"requestBody": {"content": {PREDICT_CONTENT_TYPE: BINARY_BATCH_DOC}}},
)
async def predict(
    model_id: ModelIdPath, body: PredictRequest, request: Request, cache: CacheDep
) -> Response:
    """Predict for one vector (`x`) or a batch (`instances`) with the serving version; a
    vector may be an object `{name: value}` for a model with `features`.

    A batch may also come as a binary body, `Content-Type:
    application/vnd.onlinepredict.batch` (docs/events.md §7): a 16-byte header (magic
    `93 4F 50 42`, version 1, flags, n, d), then the n x d float64 rows, little-endian,
    and optionally n float64 hints (NaN: none). The same checks (422 for any malformed
    body), the same storage for labels, the same JSON answer as `instances`.

    With `Accept: application/vnd.onlinepredict.predictions` the answer comes as columns
    (docs/events.md §8; JSON when the predictions have no column form). Prediction ids are
    `<batch id>.<row>`: one record per request stores the rows for their labels."""
    given, hints = body.rows()
    what = "x" if body.x is not None else "instances"
    rows: Sequence[Sequence[float]] = given  # type: ignore[assignment]
    if not all(type(r) is list for r in given):  # named x: the fast path takes lists only
        rows = dense_rows(await get_model(model_id, request.state.store), given, what)
    return await serve_predictions(request, model_id, rows, hints, what, cache)
