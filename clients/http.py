"""HTTP clients of the onlinepredict API: ``Client`` (sync) and ``AsyncClient`` (asyncio).

One implementation, two faces. Every operation is written once, in `_Ops`, as a generator
that yields what it needs done (a `_Call` to send, a `_Sleep` to wait) and receives the
answer: building requests, parsing answers, retries, backoff and polling live there and do
no I/O. ``Client`` drives those generators with ``httpx.Client`` and ``time.sleep``,
``AsyncClient`` with ``httpx.AsyncClient`` and ``asyncio.sleep``; their methods are made
from the operations by `_sync` and `_async`, so both faces have the same methods with the
same parameters (the async ones are awaited; tests/clients/test_sdk.py checks it).

Every endpoint of docs/design.md's "HTTP API" is covered. Idempotent calls (reads, predict,
and event/label posts whose event ids the SDK fixes before the first try, sent with one
``Idempotency-Key`` for all tries) are retried with exponential backoff on ``503`` and on
connection errors; model creation and rollback are never retried.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeAlias, TypeVar

import httpx

from clients import figures as _figures
from clients import wire
from clients._vectors import as_label, as_labels, as_matrix, as_vector, numeric_block
from clients.batch_answer import ANSWER_CONTENT_TYPE, decode_answer
from clients.errors import (
    ConnectionFailedError,
    NotFoundError,
    OnlinePredictError,
    UnavailableError,
    error_for_status,
)
from clients.schemas import (
    Checkpoint,
    EventsAccepted,
    Health,
    ModelInfo,
    ModelSpec,
    Portfolio,
    Prediction,
    PredictResponse,
    Quantification,
)

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8000"
API_KEY_HEADER = "X-API-Key"
EVENTS_CHUNK = 1000  # events per POST; below the server's default max_batch (10,000)
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Seconds per try: longer than the API's own Kafka send timeout (15 s), so a stalled broker
# comes back as the API's 503 with Retry-After rather than as a client timeout. A timeout
# is harmless anyway: the retry repeats the event ids and the Idempotency-Key.
DEFAULT_TIMEOUT_S = 20.0


def default_url() -> str:
    """``ONLINEPREDICT_API_URL`` or ``http://127.0.0.1:8000``."""
    return os.environ.get("ONLINEPREDICT_API_URL") or DEFAULT_URL


def default_api_key() -> str | None:
    return os.environ.get("ONLINEPREDICT_API_KEY") or None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: the n-th retry waits ``min(backoff * 2**n, max_backoff)`` seconds.

    ``attempts`` counts the first try; a ``Retry-After`` header on a 503 is honoured up to
    ``max_backoff``.
    """

    attempts: int = 4
    backoff: float = 0.25
    max_backoff: float = 8.0

    def delay(self, retry: int, retry_after: str | None = None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff)
            except ValueError:
                pass
        return min(self.backoff * 2**retry, self.max_backoff)


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: Any = None
    idempotent: bool = True
    raw: bool = False  # return the httpx.Response instead of raising on non-2xx
    headers: dict[str, str] | None = None  # per call, e.g. the Idempotency-Key
    content: bytes | None = None  # a binary body (instead of ``json``), with its Content-Type


@dataclass(frozen=True)
class _Sleep:
    """Wait this many seconds (between retries, between polls)."""

    seconds: float


# The protocol between the operations and a transport: an operation yields a `_Call` (and is
# sent the `httpx.Response`, or the `httpx.TransportError` that stopped it) or a `_Sleep`
# (and is sent None); it returns its result.
Step: TypeAlias = _Call | _Sleep
Reply: TypeAlias = httpx.Response | httpx.TransportError | None
T = TypeVar("T")
P = ParamSpec("P")
Op: TypeAlias = Generator[Step, Reply, T]


def _send(call: _Call, retry: RetryPolicy, base_url: str) -> Op[httpx.Response]:
    """One request with its retries: 503, 429 (refused before any work) and connection
    errors are tried again, with backoff (a Retry-After first), up to ``retry.attempts``
    times when the call is idempotent."""
    attempts = retry.attempts if call.idempotent else 1
    for attempt in range(attempts):
        last = attempt == attempts - 1
        reply = yield call
        if isinstance(reply, httpx.TransportError):
            if last:
                raise ConnectionFailedError(f"{base_url}: {reply!r}") from reply
            wait = retry.delay(attempt)
        else:
            assert reply is not None, "a transport answers a _Call with a response or an error"
            if reply.status_code not in (429, 503) or last:
                return reply
            wait = retry.delay(attempt, reply.headers.get("Retry-After"))
        logger.debug("%s %s failed, retry %d in %.2fs", call.method, call.path, attempt, wait)
        yield _Sleep(wait)
    raise AssertionError("unreachable")


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _check(response: httpx.Response) -> Any:
    body = _decode(response)
    if response.is_success:
        return body
    raise error_for_status(response.status_code, body, response.reason_phrase)


def _quote(model: str) -> str:
    from urllib.parse import quote

    return quote(model, safe="")


def new_idempotency_key() -> str:
    """A fresh key for one operation (uuid4), as the IETF draft recommends."""
    return str(uuid.uuid4())


def _key_header(key: str) -> dict[str, str]:
    """The draft's sf-string form: quoted, with ``\\`` and ``"`` escaped."""
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return {IDEMPOTENCY_HEADER: f'"{quoted}"'}


def _chunk_keys(key: str | None, n_chunks: int) -> list[str]:
    """One key per POST: the call's key for a single chunk, ``key/i`` for chunk ``i`` of
    several (each chunk is its own request body, so it needs its own key)."""
    key = key or new_idempotency_key()
    return [key] if n_chunks == 1 else [f"{key}/{i}" for i in range(n_chunks)]


def _model_list(body: Any) -> list[ModelInfo]:
    items = body.get("models", []) if isinstance(body, dict) else body or []
    return [ModelInfo.from_json(m if isinstance(m, dict) else {"id": m}) for m in items]


def _events_payload(
    X: Any,
    y: Any,
    ids: Iterable[str] | None,
    extra: dict[str, Iterable[Any]] | None,
    assign_ids: bool = True,
) -> list[dict[str, Any]]:
    rows = as_matrix(X)
    labels = as_labels(y, len(rows))
    id_list = list(ids) if ids is not None else [None] * len(rows)
    if len(id_list) != len(rows):
        raise ValueError(f"got {len(id_list)} ids for {len(rows)} vectors")
    extras = {k: list(v) for k, v in (extra or {}).items()}
    events = []
    for i, row in enumerate(rows):
        # ids fixed before the first try make the post idempotent with any API version (the
        # worker drops duplicates); without (``assign_ids=False``) the API derives them from
        # the Idempotency-Key, the same for the same key and body
        event: dict[str, Any] = {"x": row}
        if id_list[i] or assign_ids:
            event["id"] = id_list[i] or str(uuid.uuid4())
        if labels[i] is not None:
            event["y"] = labels[i]
        for key, values in extras.items():
            event[key] = values[i]
        events.append(event)
    return events


class _Ops:
    """Every operation of the SDK, written once as a generator of `Step` (no I/O here)."""

    def __init__(self, base_url: str, retry: RetryPolicy) -> None:
        self.base_url = base_url
        self.retry = retry

    def _run(self, call: _Call, parse: Callable[[Any], T] = lambda b: b) -> Op[T]:
        response = yield from _send(call, self.retry, self.base_url)
        return parse(response if call.raw else _check(response))

    # --- health ---------------------------------------------------------------------------
    def health(self) -> Op[Health]:
        """``GET /healthz``: is the API process up. Never raises on a non-2xx answer."""
        return self._run(_Call("GET", "/healthz", raw=True), _health)

    def ready(self) -> Op[Health]:
        """``GET /readyz``: are the broker and Redis reachable. Never raises on a 503."""
        return self._run(_Call("GET", "/readyz", raw=True), _health)

    # --- models ---------------------------------------------------------------------------
    def create_model(
        self,
        model: str,
        kind: str,
        dim: int,
        params: dict[str, Any] | None = None,
        *,
        features: list[str] | None = None,
        assets: list[str] | None = None,
        preprocess: dict[str, Any] | None = None,
    ) -> Op[ModelInfo]:
        """``POST /v1/models``: create a model from a learner kind, a dimension and params.

        ``features`` optionally names the ``dim`` features, in ``x``'s order; the model then
        takes ``x`` as a dict (or pandas row) of named values too. ``assets`` is their
        earlier name (an index tracker's tickers). ``preprocess`` switches on steps inside
        the model (``{"standardize": True, "intercept": True, "clip": 5.0}``, each optional);
        None sends nothing, so the kind's default applies (an intercept for the binary
        classifiers), ``{}`` asks for none. Raises `ValidationError` (422) with the
        learner constructor's message on a bad spec and `ConflictError` (409) when the id is
        taken. Not retried (not idempotent).
        """
        if features is not None and assets is not None and list(features) != list(assets):
            raise ValueError("features and assets (their earlier name) differ: give one")
        names = features if features is not None else assets
        spec = ModelSpec(model, kind, int(dim), dict(params or {}), names, preprocess)
        return self._run(
            _Call("POST", "/v1/models", spec.to_json(), idempotent=False),
            lambda b: ModelInfo.from_json({**spec.to_json(), **(b or {})}),
        )

    def list_models(self) -> Op[list[ModelInfo]]:
        """``GET /v1/models``: every model, with its version, counters and last update."""
        return self._run(_Call("GET", "/v1/models"), _model_list)

    def get_model(self, model: str) -> Op[ModelInfo]:
        """``GET /v1/models/{id}``: the spec and serving state; `NotFoundError` if unknown."""
        return self._run(_Call("GET", f"/v1/models/{_quote(model)}"), ModelInfo.from_json)

    def delete_model(self, model: str) -> Op[None]:
        """``DELETE /v1/models/{id}``."""
        return self._run(_Call("DELETE", f"/v1/models/{_quote(model)}"), lambda b: None)

    def deadletters(self, model: str, *, limit: int = 100) -> Op[list[dict[str, Any]]]:
        """``GET /v1/models/{id}/deadletters``: the events the model refused, newest first
        (at most ``limit``, 1 to 1000), each a dict with ``reason``, ``event_id``,
        ``topic``, ``partition``, ``offset``, ``time`` (and ``frame_row`` for a frame's)."""
        return self._run(
            _Call("GET", f"/v1/models/{_quote(model)}/deadletters?limit={int(limit)}"),
            lambda b: list(b.get("deadletters", [])) if isinstance(b, dict) else [],
        )

    # --- predictions ----------------------------------------------------------------------
    def predict(self, model: str, x: Any, *, hint: float | None = None) -> Op[Prediction]:
        """``POST /v1/models/{id}/predict`` with one vector: a list or 1-d ndarray, or, for
        a model with ``features``, a dict or a pandas Series of named values (missing names
        are 0).

        The result's ``prediction_id`` joins a later `label`; ``model_version`` says which
        checkpoint served it. ``hint`` is side information for learners that use one.
        """
        body: dict[str, Any] = {"x": as_vector(x)}
        if hint is not None:
            body["hint"] = float(hint)
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/predict", body), _single_prediction
        )

    def predict_batch(
        self,
        model: str,
        X: Any,
        *,
        hints: list[float | None] | None = None,
        binary: bool | None = None,
    ) -> Op[PredictResponse]:
        """``POST /v1/models/{id}/predict`` for a batch: a 2-d array, rows or dicts, or a
        DataFrame (named by its columns when they are strings).

        A numeric numpy array, or a DataFrame with unnamed columns, goes as the binary
        batch body (docs/events.md §7: the rows as one float64 block, no JSON to write or
        to parse); anything else as JSON ``{"instances": [...]}``. ``binary`` True or
        False forces one of them (True needs numbers only, no names). Either way the
        answer is asked for in the compact layout (§8: columns, one batch id), and JSON is
        read too (a server that does not write it); the result is the same.
        """
        path = f"/v1/models/{_quote(model)}/predict"
        accept = {"Accept": f"{ANSWER_CONTENT_TYPE}, application/json;q=0.5"}
        block = numeric_block(X) if binary is None else (X if binary else None)
        if block is not None:
            content = wire.encode_predict_batch(block, hints)
            headers = {"Content-Type": wire.PREDICT_CONTENT_TYPE, **accept}
            call = _Call("POST", path, content=content, headers=headers, raw=True)
            return self._run(call, _batch_answer)
        body: dict[str, Any] = {"instances": as_matrix(X)}
        if hints is not None:
            body["hints"] = list(hints)
        return self._run(_Call("POST", path, body, headers=accept, raw=True), _batch_answer)

    # --- events and labels ----------------------------------------------------------------
    def send_events(
        self,
        model: str,
        X: Any,
        y: Any = None,
        *,
        ids: Iterable[str] | None = None,
        extra: dict[str, Iterable[Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> Op[EventsAccepted]:
        """``POST /v1/models/{id}/events``: labelled or unlabelled events, produced to Kafka.

        ``X`` is a 2-d array, rows, dicts of named values, or a DataFrame (each row sent as
        ``{column: value}`` when the columns are strings: a model with ``features``).
        ``y`` may be None (all unlabelled) or hold None/NaN for unlabelled rows; ``ids`` are
        assigned (uuid4) where missing; ``extra`` adds per-event fields (e.g. ``hint``).
        Sent in chunks of ``EVENTS_CHUNK``; the returned count is the total accepted.
        Every POST carries an ``Idempotency-Key``, the same on its retries: ``idempotency_key``
        (a new uuid4 when None) for one chunk, ``f"{idempotency_key}/{i}"`` for chunk ``i``
        of several. Pass your own to repeat a whole call safely: then events without ``ids``
        go without, and the API derives their ids from the key (the same ids for the same
        key and arguments, so the workers learn them once).
        """
        events = _events_payload(X, y, ids, extra, assign_ids=idempotency_key is None)
        return self._run_events(model, events, idempotency_key)

    def send_event(
        self,
        model: str,
        x: Any,
        y: Any = None,
        *,
        id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Op[str]:
        """Send one event (with an ``Idempotency-Key``, as `send_events`); returns its id."""
        event: dict[str, Any] = {"x": as_vector(x)}
        if id or idempotency_key is None:  # as in _events_payload
            event["id"] = id or str(uuid.uuid4())
        if (label := as_label(y)) is not None:
            event["y"] = label
        key = idempotency_key or new_idempotency_key()
        return self._run(
            _Call(
                "POST",
                f"/v1/models/{_quote(model)}/events",
                {"events": [event]},
                headers=_key_header(key),
            ),
            lambda b: _sum_accepted([event], [b]).ids[0],
        )

    def _run_events(
        self, model: str, events: list[dict[str, Any]], idempotency_key: str | None
    ) -> Op[EventsAccepted]:
        path = f"/v1/models/{_quote(model)}/events"
        chunks = _chunks(events)
        bodies: list[Any] = []
        for chunk, key in zip(chunks, _chunk_keys(idempotency_key, len(chunks)), strict=True):
            call = _Call("POST", path, {"events": chunk}, headers=_key_header(key))
            bodies.append((yield from self._run(call)))
        return _sum_accepted(events, bodies)

    def label(
        self, model: str, prediction_id: str, y: Any, *, idempotency_key: str | None = None
    ) -> Op[dict[str, Any]]:
        """``POST /v1/models/{id}/labels``: the label of an earlier prediction.

        Sent with an ``Idempotency-Key`` (``idempotency_key``, or a new uuid4), the same on
        every retry, so a retry after a lost answer gets ``{"status": "accepted"}`` again; a
        label that a failed or timed-out try had claimed is produced by the retry (the
        server's pending claims). ``"duplicate"``: another label of this prediction came first.
        """
        body = {"prediction_id": prediction_id, "y": as_label(y)}
        key = idempotency_key or new_idempotency_key()
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/labels", body, headers=_key_header(key)),
            lambda b: b or {},
        )

    # --- task-specific endpoints ----------------------------------------------------------
    def quantify(self, model: str, X: Any, *, method: str | None = None) -> Op[Quantification]:
        """``POST /v1/models/{id}/quantify``: class prevalence of a batch (quantifiers only)."""
        body: dict[str, Any] = {"instances": as_matrix(X)}
        if method:
            body["method"] = method
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/quantify", body), Quantification.from_json
        )

    def portfolio(self, model: str) -> Op[Portfolio]:
        """``GET /v1/models/{id}/portfolio``: an index tracker's current weights by asset."""
        return self._run(_Call("GET", f"/v1/models/{_quote(model)}/portfolio"), Portfolio.from_json)

    def register_block(self, model: str, X: Any, *, id: str | None = None) -> Op[dict[str, Any]]:
        """``POST /v1/models/{id}/blocks``: design vectors of a transductive learner's block.

        The registration carries an idempotency ``id`` (uuid4 when not given), so it is retried.
        """
        body = {"id": id or str(uuid.uuid4()), "vectors": as_matrix(X)}
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/blocks", body), lambda b: b or {}
        )

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoints(self, model: str) -> Op[list[Checkpoint]]:
        """``GET /v1/models/{id}/checkpoints``: the kept checkpoints, newest first."""
        return self._run(
            _Call("GET", f"/v1/models/{_quote(model)}/checkpoints"),
            lambda b: [
                Checkpoint.from_json(c)
                for c in (b.get("checkpoints", []) if isinstance(b, dict) else b or [])
            ],
        )

    def rollback(
        self,
        model: str,
        version: int,
        *,
        discard_after: bool = False,
        skip_ids: Sequence[str] = (),
    ) -> Op[dict[str, Any]]:
        """``POST /v1/models/{id}/rollback``: restore checkpoint ``version`` and its offset;
        the worker re-learns the events after it, or with ``discard_after`` never learns
        them (discarded); ``skip_ids``: event ids never to learn (docs/checkpoints.md)."""
        body: dict[str, Any] = {"version": int(version)}
        if discard_after:
            body["discard_after"] = True
        if skip_ids:
            body["skip_ids"] = list(skip_ids)
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/rollback", body, idempotent=False),
            lambda b: b or {},
        )

    # --- metrics --------------------------------------------------------------------------
    def metrics_text(self) -> Op[str]:
        """``GET /metrics``: the Prometheus exposition (for scrapers; the SDK reads the JSON)."""
        return self._run(_Call("GET", "/metrics"), lambda b: b if isinstance(b, str) else "")

    def model_snapshot(self, model: str) -> Op[dict[str, Any]]:
        """The model's live figures as JSON, from ``GET /v1/models/{id}/metrics``: ``kind``,
        ``counters`` (applied, duplicate, rejected), ``figures`` (cumulative loss and regret,
        rmse, error rate ...), ``diagnostics`` (the learner's last step) and ``holdings``
        (index trackers). `NotFoundError` for an unknown model."""
        return self._run(
            _Call("GET", _figures.figures_path(_quote(model))),
            lambda b: _figures.model_entry(b, model),
        )

    def model_metrics(self, model: str) -> Op[dict[str, Any]]:
        """A model's headline figures (events, rmse or mistakes, regret ...), from
        ``GET /v1/models/{id}/metrics`` (see `clients.figures.summarize`)."""
        return self._run(
            _Call("GET", _figures.figures_path(_quote(model))),
            lambda b: _figures.summarize(_figures.model_entry(b, model)),
        )

    # --- waiting for the workers ----------------------------------------------------------
    def model_exists(self, model: str) -> Op[bool]:
        """True when ``GET /v1/models/{id}`` answers 2xx, False on 404."""
        try:
            yield from self.get_model(model)
        except NotFoundError:
            return False
        return True

    def processed(self, model: str) -> Op[int]:
        """Events the workers have taken into the model's checkpointed state (applied +
        duplicate + rejected), from ``GET /v1/models/{id}``, else its ``/metrics``."""
        info = yield from self.get_model(model)
        if info.processed is not None:
            return info.processed
        entry = yield from self.model_snapshot(model)
        return sum(_figures.event_counts(entry).values())

    def wait_processed(
        self,
        model: str,
        target: int,
        timeout: float = 120.0,
        interval: float = 0.25,
        on_progress: Callable[[int], None] | None = None,
    ) -> Op[int]:
        """Poll until the workers have processed ``target`` events of ``model``.

        ``on_progress`` (a plain function, for both clients) is called with each count read.
        Checkpoints are written every ``commit_every`` events or ``commit_interval_s``
        seconds, so the count lags the stream by at most that. Raises `UnavailableError`
        after ``timeout`` seconds, with the count reached.

        Examples
        --------
        >>> before = api.processed("demo")  # doctest: +SKIP
        >>> api.send_events("demo", X, y)  # doctest: +SKIP
        >>> api.wait_processed("demo", before + len(X))  # doctest: +SKIP
        """
        deadline = time.monotonic() + timeout
        while True:
            done = yield from self.processed(model)
            if on_progress is not None:
                on_progress(done)
            if done >= target:
                return done
            if time.monotonic() > deadline:
                raise UnavailableError(
                    f"workers processed {done} of {target} events of model {model!r} within "
                    f"{timeout:.0f}s: are workers running (onlinepredict worker)?"
                )
            yield _Sleep(interval)

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.2) -> Op[Health]:
        """Poll ``/readyz`` until it answers 2xx; raises `UnavailableError` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                health = yield from self.ready()
                if health.ok:
                    return health
            except ConnectionFailedError:
                pass
            if time.monotonic() > deadline:
                raise UnavailableError(f"{self.base_url} not ready after {timeout}s", status=None)
            yield _Sleep(interval)


def _health(response: httpx.Response) -> Health:
    body = _decode(response)
    return Health(
        ok=response.is_success,
        status=response.status_code,
        body=body if isinstance(body, dict) else {"detail": body},
    )


def _batch_answer(response: httpx.Response) -> PredictResponse:
    """A predict answer in either layout: compact (by its Content-Type) or JSON."""
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if response.is_success and media == ANSWER_CONTENT_TYPE:
        try:
            return PredictResponse.from_json(decode_answer(response.content))
        except ValueError as exc:
            raise OnlinePredictError(f"unreadable compact answer: {exc}") from None
    return PredictResponse.from_json(_check(response))


def _single_prediction(body: dict[str, Any]) -> Prediction:
    resp = PredictResponse.from_json(body)
    if not resp.predictions:
        raise OnlinePredictError("the server answered with no prediction", body=body)
    pred = resp.predictions[0]
    pred.model_version = resp.model_version
    return pred


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": "onlinepredict-sdk", "Accept": "application/json"}
    if api_key:
        headers[API_KEY_HEADER] = api_key
    return headers


def _chunks(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [events[i : i + EVENTS_CHUNK] for i in range(0, len(events), EVENTS_CHUNK)] or [[]]


def _sum_accepted(events: list[dict[str, Any]], bodies: list[Any]) -> EventsAccepted:
    count, ids = 0, list[str]()
    for body, chunk in zip(bodies, _chunks(events), strict=True):
        # a 202 without a count in its body accepted the whole chunk
        got = EventsAccepted.from_json(body) if isinstance(body, dict) else None
        count += got.count if got is not None and got.count else len(chunk)
        # the server's ids (it assigned those we left out), else the ones we sent
        sent = [e.get("id", "") for e in chunk]
        ids += got.ids if got is not None and len(got.ids) == len(chunk) else sent
    return EventsAccepted(count=count, ids=ids)


# --- the two faces ------------------------------------------------------------------------------
def _sync(op: Callable[Concatenate[_Ops, P], Op[T]]) -> Callable[Concatenate[Client, P], T]:
    """``Client``'s method for an operation: drive it with blocking I/O."""

    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(op(self._ops, *args, **kwargs))

    functools.update_wrapper(method, op)
    return method


def _async(
    op: Callable[Concatenate[_Ops, P], Op[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """``AsyncClient``'s method for an operation: a coroutine driving it with asyncio."""

    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._drive(op(self._ops, *args, **kwargs))

    functools.update_wrapper(method, op)
    return method


class _Face:
    """What both clients share: the operations' state (address, retry policy)."""

    _ops: _Ops

    @property
    def base_url(self) -> str:
        return self._ops.base_url

    @property
    def retry(self) -> RetryPolicy:
        return self._ops.retry

    @retry.setter
    def retry(self, policy: RetryPolicy) -> None:
        self._ops.retry = policy


class Client(_Face):
    """Synchronous client of the onlinepredict API.

    Parameters
    ----------
    base_url : str, optional
        The API's address; default ``ONLINEPREDICT_API_URL`` or ``http://127.0.0.1:8000``.
    api_key : str, optional
        Sent as the ``X-API-Key`` header; default ``ONLINEPREDICT_API_KEY``.
    timeout : float, default=20.0
        Seconds for connect, read and write of one try; longer than the API's 15 s Kafka
        send timeout, so a stalled broker is answered by the API's 503 (then retried).
    retry : RetryPolicy, optional
        Backoff for idempotent calls on 503 and connection errors.
    transport : httpx.BaseTransport, optional
        Passed to httpx (e.g. an ASGI or a proxy transport).

    Examples
    --------
    >>> import numpy as np
    >>> from clients import Client
    >>> with Client("http://127.0.0.1:8000") as api:  # doctest: +SKIP
    ...     api.create_model("demo", kind="pa", dim=3, params={"C": 1.0})
    ...     api.send_events("demo", np.eye(3), y=[1.0, 2.0, 3.0])
    ...     p = api.predict("demo", [1.0, 0.0, 0.0])
    ...     api.label("demo", p.prediction_id, 1.0)
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._ops = _Ops((base_url or default_url()).rstrip("/"), retry or RetryPolicy())
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_headers(api_key if api_key is not None else default_api_key()),
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _drive(self, op: Op[T]) -> T:
        """Run an operation: send its calls with httpx.Client, sleep its sleeps."""
        reply: Reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, _Sleep):
                time.sleep(step.seconds)
                reply = None
                continue
            try:
                reply = self._http.request(
                    step.method,
                    step.path,
                    json=step.json,
                    content=step.content,
                    headers=step.headers,
                )
            except httpx.TransportError as exc:
                reply = exc

    # the endpoints (docs/design.md, "HTTP API"), in `_Ops`' order; `AsyncClient` lists the same
    health = _sync(_Ops.health)
    ready = _sync(_Ops.ready)
    create_model = _sync(_Ops.create_model)
    list_models = _sync(_Ops.list_models)
    get_model = _sync(_Ops.get_model)
    delete_model = _sync(_Ops.delete_model)
    deadletters = _sync(_Ops.deadletters)
    predict = _sync(_Ops.predict)
    predict_batch = _sync(_Ops.predict_batch)
    send_events = _sync(_Ops.send_events)
    send_event = _sync(_Ops.send_event)
    label = _sync(_Ops.label)
    quantify = _sync(_Ops.quantify)
    portfolio = _sync(_Ops.portfolio)
    register_block = _sync(_Ops.register_block)
    checkpoints = _sync(_Ops.checkpoints)
    rollback = _sync(_Ops.rollback)
    metrics_text = _sync(_Ops.metrics_text)
    model_snapshot = _sync(_Ops.model_snapshot)
    model_metrics = _sync(_Ops.model_metrics)
    model_exists = _sync(_Ops.model_exists)
    processed = _sync(_Ops.processed)
    wait_processed = _sync(_Ops.wait_processed)
    wait_ready = _sync(_Ops.wait_ready)


class AsyncClient(_Face):
    """Asynchronous client: the same methods as `Client`, with the same parameters, awaited.

    Examples
    --------
    >>> import asyncio
    >>> from clients import AsyncClient
    >>> async def main():
    ...     async with AsyncClient("http://127.0.0.1:8000") as api:
    ...         return (await api.predict("demo", [1.0, 0.0, 0.0])).value
    >>> asyncio.run(main())  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._ops = _Ops((base_url or default_url()).rstrip("/"), retry or RetryPolicy())
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(api_key if api_key is not None else default_api_key()),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _drive(self, op: Op[T]) -> T:
        """Run an operation: send its calls with httpx.AsyncClient, sleep with asyncio."""
        reply: Reply = None
        while True:
            try:
                step = op.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, _Sleep):
                await asyncio.sleep(step.seconds)
                reply = None
                continue
            try:
                reply = await self._http.request(
                    step.method,
                    step.path,
                    json=step.json,
                    content=step.content,
                    headers=step.headers,
                )
            except httpx.TransportError as exc:
                reply = exc

    health = _async(_Ops.health)
    ready = _async(_Ops.ready)
    create_model = _async(_Ops.create_model)
    list_models = _async(_Ops.list_models)
    get_model = _async(_Ops.get_model)
    delete_model = _async(_Ops.delete_model)
    deadletters = _async(_Ops.deadletters)
    predict = _async(_Ops.predict)
    predict_batch = _async(_Ops.predict_batch)
    send_events = _async(_Ops.send_events)
    send_event = _async(_Ops.send_event)
    label = _async(_Ops.label)
    quantify = _async(_Ops.quantify)
    portfolio = _async(_Ops.portfolio)
    register_block = _async(_Ops.register_block)
    checkpoints = _async(_Ops.checkpoints)
    rollback = _async(_Ops.rollback)
    metrics_text = _async(_Ops.metrics_text)
    model_snapshot = _async(_Ops.model_snapshot)
    model_metrics = _async(_Ops.model_metrics)
    model_exists = _async(_Ops.model_exists)
    processed = _async(_Ops.processed)
    wait_processed = _async(_Ops.wait_processed)
    wait_ready = _async(_Ops.wait_ready)
