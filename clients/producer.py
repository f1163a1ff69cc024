"""Kafka producer helper: events keyed by model id, batched; a batch of one model's
examples travels as binary frames (docs/events.md §6, ``clients.wire.encode_frame``), one
event as JSON (``send``, ``send_event``, or ``send_many(..., format="json")``).

The key is the model id, so all of a model's events land on one partition (single writer).
A model created through the API lives on one partition for life, its home (``partition``
in ``GET /v1/models/{id}``): give the producer ``partitions={model: partition}`` so its
events go there directly (a worker that finds a model's event on another partition
forwards it home, which costs a second produce; docs/reliability.md, "Partitions"), and
``incarnations={model: incarnation}`` (``incarnation`` in ``GET /v1/models/{id}``) so an
event still in flight when the model is deleted and created again is never learned by
the new model.
Each event gets a uuid4 ``id`` where it has none: that id is the worker's idempotency key,
so re-sending after a failure can never double-apply an event. The producer is *not*
Kafka-idempotent (the testbed broker lacks it); correctness relies on the event ids.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from clients import wire
from clients._vectors import as_label, as_labels, as_matrix, as_vector
from clients.errors import ConnectionFailedError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EVENTS_TOPIC = "onlinepredict.events"
FRAME_BYTES = 512 * 1024  # a frame's rows stay under this (Kafka's default record cap: 1 MiB)
FORMATS = ("frame", "json")


def frame_rows(dim: int) -> int:
    """Rows per frame at dimension ``dim``: the frame stays under ``FRAME_BYTES`` with ids
    of up to 64 bytes (a uuid4 takes 36)."""
    return max(1, FRAME_BYTES // (8 * dim + 8 + 8 + 1 + 4 + 64))


def default_bootstrap() -> str:
    """``ONLINEPREDICT_KAFKA_BOOTSTRAP`` or ``127.0.0.1:9092``."""
    return os.environ.get("ONLINEPREDICT_KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def default_topic() -> str:
    return os.environ.get("ONLINEPREDICT_EVENTS_TOPIC") or EVENTS_TOPIC


def make_event(
    model: str,
    x: Any,
    y: Any = None,
    *,
    id: str | None = None,
    ts: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One example as docs/events.md's JSON (``clients/wire.py``): ``{"model", "id", "x",
    "y", "ts"}`` plus ``hint`` when given and any extra fields. ``x`` as `Client.predict`
    takes it: a list, a 1-d array, or, for a model with ``features``, a dict or a pandas
    Series of named values (sent as an object ``{name: value}``).

    Examples
    --------
    >>> e = make_event("m", [1, 2], True, id="e1", ts=0.0)
    >>> e
    {'model': 'm', 'id': 'e1', 'x': [1.0, 2.0], 'y': 1, 'ts': 0.0}
    >>> len(make_event("m", [0.5])["id"])  # a uuid4 where none is given
    36
    """
    vector = as_vector(x)  # refuses NaN and inf
    return wire.example(model, id or str(uuid.uuid4()), vector, as_label(y), ts=ts, **extra)


encode_event = wire.encode_value  # kept under its old name: SDK users may import it


class EventProducer:
    """Produce events to ``onlinepredict.events`` with aiokafka.

    Parameters
    ----------
    bootstrap : str, optional
        Broker addresses; default ``ONLINEPREDICT_KAFKA_BOOTSTRAP`` or ``127.0.0.1:9092``.
    topic : str, optional
        Default ``ONLINEPREDICT_EVENTS_TOPIC`` or ``onlinepredict.events``.
    linger_ms : int, default=5
        How long aiokafka waits to fill a batch.
    max_batch_size : int, default=262144
        Bytes per partition batch.
    partitions : Mapping[str, int], optional
        Home partition per model (``partition`` of ``GET /v1/models/{id}``); a model listed
        here is produced to that partition, any other by its key's hash.
    incarnations : Mapping[str, str], optional
        Incarnation per model (``incarnation`` of ``GET /v1/models/{id}``, or
        ``ModelInfo.incarnation``), put on each of its events (``"incarnation"``, and in
        frames): after the model is deleted and created again, an event for the old one
        still in flight is dead-lettered instead of learned by the new one.
    **kafka : Any
        Passed to ``AIOKafkaProducer`` (``security_protocol``, ``sasl_mechanism``,
        ``sasl_plain_username``, ``sasl_plain_password``, ``ssl_context``, ...).

    Examples
    --------
    >>> import asyncio, numpy as np
    >>> async def main():
    ...     async with EventProducer("127.0.0.1:9092") as producer:
    ...         ids = await producer.send_many("demo", np.eye(3), [1.0, 2.0, 3.0])
    ...     return len(ids)
    >>> asyncio.run(main())  # doctest: +SKIP
    3
    """

    def __init__(
        self,
        bootstrap: str | None = None,
        *,
        topic: str | None = None,
        linger_ms: int = 5,
        max_batch_size: int = 256 * 1024,
        partitions: Mapping[str, int] | None = None,
        incarnations: Mapping[str, str] | None = None,
        **kafka: Any,
    ) -> None:
        self.bootstrap = bootstrap or default_bootstrap()
        self.topic = topic or default_topic()
        self.partitions = dict(partitions or {})
        self.incarnations = {m: i for m, i in (incarnations or {}).items() if i}
        self._options = {
            "linger_ms": linger_ms,
            "max_batch_size": max_batch_size,
            "acks": "all",
            "enable_idempotence": False,  # the testbed broker lacks it; ids dedupe instead
            **kafka,
        }
        self._producer: Any = None

    async def start(self) -> None:
        try:
            from aiokafka import AIOKafkaProducer
        except ImportError as exc:  # pragma: no cover - aiokafka is a core dependency
            raise RuntimeError("the Kafka producer needs aiokafka: pip install aiokafka") from exc
        from aiokafka.errors import KafkaError

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, **self._options)
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            raise ConnectionFailedError(f"Kafka at {self.bootstrap}: {exc}") from exc
        self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _require(self) -> Any:
        if self._producer is None:
            raise RuntimeError("EventProducer not started: use 'async with' or await start()")
        return self._producer

    async def send_event(self, event: Mapping[str, Any]) -> asyncio.Future[Any]:
        """Queue one prepared event (see `make_event`); returns the delivery future."""
        incarnation = self.incarnations.get(str(event["model"]))
        if incarnation and wire.INCARNATION not in event:
            event = {**event, wire.INCARNATION: incarnation}
        key, value = wire.encode(event)
        return await self._require().send(
            self.topic, value=value, key=key, partition=self.partitions.get(str(event["model"]))
        )

    async def send(
        self, model: str, x: Any, y: Any = None, *, id: str | None = None, **extra: Any
    ) -> str:
        """Send one event and wait for the broker's acknowledgement; returns its id."""
        event = make_event(model, x, y, id=id, **extra)
        await (await self.send_event(event))
        return event["id"]

    async def send_frame(
        self,
        model: str,
        ids: Sequence[str],
        X: Any,
        y: Sequence[Any] | None = None,
        hints: Sequence[float | None] | None = None,
    ) -> asyncio.Future[Any]:
        """Queue one frame (``clients.wire.encode_frame``'s arguments); returns the delivery
        future."""
        value = wire.encode_frame(model, ids, X, y, hints, incarnation=self.incarnations.get(model))
        return await self._require().send(
            self.topic,
            value=value,
            key=wire.encode_key(model),
            partition=self.partitions.get(model),
        )

    async def send_many(
        self,
        model: str,
        X: Any,
        y: Any = None,
        *,
        ids: Iterable[str | None] | None = None,
        hints: Sequence[float | None] | None = None,
        format: str = "frame",
    ) -> list[str]:
        """Send a batch (2-d array, DataFrame, rows or dicts) and wait for all
        acknowledgements. A DataFrame whose columns are strings sends each row as an object
        ``{column: value}`` (a model created with those ``features``).

        ``y`` None sends unlabelled vectors. ``format`` "frame" (default) sends binary
        frames of up to ``frame_rows(dim)`` rows each (named rows go as JSON: a frame's
        columns are positional), "json" one JSON record per event;
        the worker learns either bit for bit alike. Returns the event ids in order.
        """
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        rows = as_matrix(X)
        labels = as_labels(y, len(rows))
        id_list: list[str | None] = list(ids) if ids is not None else [None] * len(rows)
        if len(id_list) != len(rows):
            raise ValueError(f"got {len(id_list)} ids for {len(rows)} vectors")
        if hints is not None and len(hints) != len(rows):
            raise ValueError(f"got {len(hints)} hints for {len(rows)} vectors")
        # a frame's columns are positional: named rows (objects) go as JSON, which the
        # worker maps by the model's features
        if format == "frame" and rows and not any(isinstance(r, dict) for r in rows):
            return await self._send_frames(
                model, cast(list[list[float]], rows), labels, id_list, hints
            )
        events = [
            make_event(model, row, label, id=eid, **({} if h is None else {"hint": h}))
            for row, label, eid, h in zip(
                rows, labels, id_list, hints or [None] * len(rows), strict=True
            )
        ]
        futures = [await self.send_event(e) for e in events]
        await asyncio.gather(*futures)
        return [e["id"] for e in events]

    async def _send_frames(
        self,
        model: str,
        rows: list[list[float]],
        labels: list[Any],
        id_list: list[str | None],
        hints: Sequence[float | None] | None,
    ) -> list[str]:
        import numpy as np

        X = np.array(rows, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError("every vector of a batch must have the same length")
        if not np.isfinite(X).all():
            raise ValueError("feature vector contains NaN or inf")
        ids = [eid or str(uuid.uuid4()) for eid in id_list]
        step = frame_rows(X.shape[1])
        futures = [
            await self.send_frame(
                model,
                ids[i : i + step],
                X[i : i + step],
                labels[i : i + step],
                None if hints is None else hints[i : i + step],
            )
            for i in range(0, len(ids), step)
        ]
        await asyncio.gather(*futures)
        return ids

    async def flush(self) -> None:
        """Wait until every queued event is delivered."""
        await self._require().flush()
