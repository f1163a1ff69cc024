"""HTTP clients of the onlinepredict API: ``Client`` (sync) and ``AsyncClient`` (asyncio).

Both have the same methods (the async ones are awaited). Every endpoint of docs/design.md's
"HTTP API" is covered. Idempotent calls (reads, predict, and event/label posts whose event
ids the SDK fixes before the first try, sent with one ``Idempotency-Key`` for all tries)
are retried with exponential backoff on ``503`` and on connection errors; model creation
and rollback are never retried.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import httpx

from clients import metrics as _metrics
from clients._vectors import as_label, as_labels, as_matrix, as_vector
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


class _Api:
    """The endpoints, written once; ``_run`` is sync in ``Client`` and async in ``AsyncClient``."""

    def _run(self, call: _Call, parse: Callable[[Any], Any] = lambda b: b) -> Any:
        raise NotImplementedError

    # --- health ---------------------------------------------------------------------------
    def health(self) -> Health:
        """``GET /healthz``: is the API process up. Never raises on a non-2xx answer."""
        return self._run(_Call("GET", "/healthz", raw=True), _health)

    def ready(self) -> Health:
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
        assets: list[str] | None = None,
    ) -> ModelInfo:
        """``POST /v1/models``: create a model from a learner kind, a dimension and params.

        ``assets`` optionally names the ``dim`` features (index trackers: tickers). Raises
        `ValidationError` (422) with the learner constructor's message on a bad spec and
        `ConflictError` (409) when the id is taken. Not retried (not idempotent).
        """
        spec = ModelSpec(model, kind, int(dim), dict(params or {}), assets)
        return self._run(
            _Call("POST", "/v1/models", spec.to_json(), idempotent=False),
            lambda b: ModelInfo.from_json({**spec.to_json(), **(b or {})}),
        )

    def list_models(self) -> list[ModelInfo]:
        """``GET /v1/models``: every model, with its version, counters and last update."""
        return self._run(_Call("GET", "/v1/models"), _model_list)

    def get_model(self, model: str) -> ModelInfo:
        """``GET /v1/models/{id}``: the spec and serving state; `NotFoundError` if unknown."""
        return self._run(_Call("GET", f"/v1/models/{_quote(model)}"), ModelInfo.from_json)

    def delete_model(self, model: str) -> None:
        """``DELETE /v1/models/{id}``."""
        return self._run(_Call("DELETE", f"/v1/models/{_quote(model)}"), lambda b: None)

    # --- predictions ----------------------------------------------------------------------
    def predict(self, model: str, x: Any, *, hint: float | None = None) -> Prediction:
        """``POST /v1/models/{id}/predict`` with one vector (list, ndarray, Series).

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
        self, model: str, X: Any, *, hints: list[float | None] | None = None
    ) -> PredictResponse:
        """``POST /v1/models/{id}/predict`` with ``{"instances": [...]}`` (2-d array, DataFrame)."""
        body: dict[str, Any] = {"instances": as_matrix(X)}
        if hints is not None:
            body["hints"] = list(hints)
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/predict", body), PredictResponse.from_json
        )

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
    ) -> EventsAccepted:
        """``POST /v1/models/{id}/events``: labelled or unlabelled events, produced to Kafka.

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
    ) -> str:
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
    ) -> Any:
        raise NotImplementedError

    def label(
        self, model: str, prediction_id: str, y: Any, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
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
    def quantify(self, model: str, X: Any, *, method: str | None = None) -> Quantification:
        """``POST /v1/models/{id}/quantify``: class prevalence of a batch (quantifiers only)."""
        body: dict[str, Any] = {"instances": as_matrix(X)}
        if method:
            body["method"] = method
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/quantify", body), Quantification.from_json
        )

    def portfolio(self, model: str) -> Portfolio:
        """``GET /v1/models/{id}/portfolio``: an index tracker's current weights by asset."""
        return self._run(_Call("GET", f"/v1/models/{_quote(model)}/portfolio"), Portfolio.from_json)

    def register_block(self, model: str, X: Any, *, id: str | None = None) -> dict[str, Any]:
        """``POST /v1/models/{id}/blocks``: design vectors of a transductive learner's block.

        The registration carries an idempotency ``id`` (uuid4 when not given), so it is retried.
        """
        body = {"id": id or str(uuid.uuid4()), "vectors": as_matrix(X)}
        return self._run(
            _Call("POST", f"/v1/models/{_quote(model)}/blocks", body), lambda b: b or {}
        )

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoints(self, model: str) -> list[Checkpoint]:
        """``GET /v1/models/{id}/checkpoints``: the kept checkpoints, newest first."""
        return self._run(
            _Call("GET", f"/v1/models/{_quote(model)}/checkpoints"),
            lambda b: [
                Checkpoint.from_json(c)
                for c in (b.get("checkpoints", []) if isinstance(b, dict) else b or [])
            ],
        )

    def rollback(self, model: str, version: int) -> dict[str, Any]:
        """``POST /v1/models/{id}/rollback``: restore checkpoint ``version`` and its offset."""
        return self._run(
            _Call(
                "POST",
                f"/v1/models/{_quote(model)}/rollback",
                {"version": int(version)},
                idempotent=False,
            ),
            lambda b: b or {},
        )

    # --- metrics --------------------------------------------------------------------------
    def metrics_text(self) -> str:
        """``GET /metrics``: the Prometheus exposition."""
        return self._run(_Call("GET", "/metrics"), lambda b: b if isinstance(b, str) else "")

    def model_metrics(self, model: str) -> dict[str, Any]:
        """A model's headline figures from ``/metrics`` (events, rmse/mistakes, regret...)."""
        return self._run(
            _Call("GET", "/metrics"),
            lambda b: _metrics.summarize(_metrics.model_samples(b or "", model)),
        )


def _health(response: httpx.Response) -> Health:
    body = _decode(response)
    return Health(
        ok=response.is_success,
        status=response.status_code,
        body=body if isinstance(body, dict) else {"detail": body},
    )


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


class Client(_Api):
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
        self.base_url = (base_url or default_url()).rstrip("/")
        self.retry = retry or RetryPolicy()
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

    def _send(self, call: _Call) -> httpx.Response:
        attempts = self.retry.attempts if call.idempotent else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, headers=call.headers
                )
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailedError(f"{self.base_url}: {exc!r}") from exc
                wait = self.retry.delay(attempt)
            else:
                if response.status_code != 503 or last:
                    return response
                wait = self.retry.delay(attempt, response.headers.get("Retry-After"))
            logger.debug("%s %s failed, retry %d in %.2fs", call.method, call.path, attempt, wait)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _run(self, call: _Call, parse: Callable[[Any], Any] = lambda b: b) -> Any:
        response = self._send(call)
        return parse(response if call.raw else _check(response))

    def _run_events(
        self, model: str, events: list[dict[str, Any]], idempotency_key: str | None
    ) -> EventsAccepted:
        path = f"/v1/models/{_quote(model)}/events"
        chunks = _chunks(events)
        bodies = [
            self._run(_Call("POST", path, {"events": c}, headers=_key_header(k)))
            for c, k in zip(chunks, _chunk_keys(idempotency_key, len(chunks)), strict=True)
        ]
        return _sum_accepted(events, bodies)

    def model_exists(self, model: str) -> bool:
        """True when ``GET /v1/models/{id}`` answers 2xx, False on 404."""
        try:
            self.get_model(model)
        except NotFoundError:
            return False
        return True

    def processed(self, model: str) -> int:
        """Events the workers have taken into the model's checkpointed state
        (applied + duplicate + rejected), from ``GET /v1/models/{id}`` or else ``/metrics``."""
        info = self.get_model(model)
        if info.processed is not None:
            return info.processed
        counts = _metrics.event_counts(_metrics.model_samples(self.metrics_text(), model))
        return int(sum(counts.values()))

    def wait_processed(
        self,
        model: str,
        target: int,
        timeout: float = 120.0,
        interval: float = 0.25,
        on_progress: Callable[[int], None] | None = None,
    ) -> int:
        """Poll until the workers have processed ``target`` events of ``model``.

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
            done = self.processed(model)
            if on_progress is not None:
                on_progress(done)
            if done >= target:
                return done
            if time.monotonic() > deadline:
                raise UnavailableError(
                    f"workers processed {done} of {target} events of model {model!r} within "
                    f"{timeout:.0f}s: are workers running (onlinepredict worker)?"
                )
            time.sleep(interval)

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.2) -> Health:
        """Poll ``/readyz`` until it answers 2xx; raises `UnavailableError` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                health = self.ready()
                if health.ok:
                    return health
            except ConnectionFailedError:
                health = None
            if time.monotonic() > deadline:
                raise UnavailableError(f"{self.base_url} not ready after {timeout}s", status=None)
            time.sleep(interval)


class AsyncClient(_Api):
    """Asynchronous client: the same methods as `Client`, awaited.

    Every endpoint method returns an awaitable of the type `Client`'s method returns (the
    endpoints are written once for both clients, so the annotations show the sync types).

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
        self.base_url = (base_url or default_url()).rstrip("/")
        self.retry = retry or RetryPolicy()
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

    async def _send(self, call: _Call) -> httpx.Response:
        attempts = self.retry.attempts if call.idempotent else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, headers=call.headers
                )
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailedError(f"{self.base_url}: {exc!r}") from exc
                wait = self.retry.delay(attempt)
            else:
                if response.status_code != 503 or last:
                    return response
                wait = self.retry.delay(attempt, response.headers.get("Retry-After"))
            logger.debug("%s %s failed, retry %d in %.2fs", call.method, call.path, attempt, wait)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _run(self, call: _Call, parse: Callable[[Any], Any] = lambda b: b) -> Any:
        response = await self._send(call)
        return parse(response if call.raw else _check(response))

    async def _run_events(
        self, model: str, events: list[dict[str, Any]], idempotency_key: str | None
    ) -> EventsAccepted:
        path = f"/v1/models/{_quote(model)}/events"
        chunks = _chunks(events)
        bodies = [
            await self._run(_Call("POST", path, {"events": c}, headers=_key_header(k)))
            for c, k in zip(chunks, _chunk_keys(idempotency_key, len(chunks)), strict=True)
        ]
        return _sum_accepted(events, bodies)

    async def model_exists(self, model: str) -> bool:
        """True when the model exists, False on 404."""
        try:
            await cast(Awaitable[ModelInfo], self.get_model(model))
        except NotFoundError:
            return False
        return True

    async def processed(self, model: str) -> int:
        """Events the workers have taken into the model's state (see `Client.processed`)."""
        info = await cast(Awaitable[ModelInfo], self.get_model(model))
        if info.processed is not None:
            return info.processed
        text = await cast(Awaitable[str], self.metrics_text())
        counts = _metrics.event_counts(_metrics.model_samples(text, model))
        return int(sum(counts.values()))

    async def wait_processed(
        self, model: str, target: int, timeout: float = 120.0, interval: float = 0.25
    ) -> int:
        """Wait until the workers have processed ``target`` events (see `Client.wait_processed`)."""
        deadline = time.monotonic() + timeout
        while (done := await self.processed(model)) < target:
            if time.monotonic() > deadline:
                raise UnavailableError(
                    f"workers processed {done} of {target} events of model {model!r} within "
                    f"{timeout:.0f}s: are workers running (onlinepredict worker)?"
                )
            await asyncio.sleep(interval)
        return done
