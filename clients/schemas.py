"""Typed views of the API's JSON answers (docs/design.md, "HTTP API").

The dataclasses are tolerant: unknown fields are kept in ``extra`` and missing optional
fields default, so an older SDK keeps working against a newer server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _split(cls: type, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    known = {k: v for k, v in data.items() if k in names}
    extra = {k: v for k, v in data.items() if k not in names}
    return known, extra


def _first_int(data: dict[str, Any], *paths: str) -> int | None:
    """The first integer found at one of the dotted ``paths`` of ``data``."""
    for path in paths:
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            return int(node)
    return None


@dataclass
class ModelSpec:
    """What ``POST /v1/models`` takes: the model id, the learner kind, the dimension, params
    and optionally the feature names."""

    id: str
    kind: str
    dim: int
    params: dict[str, Any] = field(default_factory=dict)
    features: list[str] | None = None  # names of x's features (an index tracker's assets)
    preprocess: dict[str, Any] | None = None  # e.g. {"standardize": True, "intercept": True}

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "kind": self.kind, "dim": int(self.dim), "params": self.params}
        if self.features is not None:
            out["features"] = list(self.features)
        if self.preprocess is not None:
            out["preprocess"] = dict(self.preprocess)
        return out


@dataclass
class ModelInfo:
    """A model as ``GET /v1/models/{id}`` shows it.

    ``version`` is the checkpoint version (0 before the first checkpoint); ``applied``,
    ``duplicate`` and ``rejected`` count the events the workers have processed into the
    checkpointed state (None when the server does not report them); ``updated_at`` is the
    Unix time of the last checkpoint (None before the first); ``partition`` is the events
    partition the model lives on (give it to ``EventProducer(partitions=...)``);
    ``incarnation`` names this creation of the model (give it to
    ``EventProducer(incarnations=...)``: a record for a deleted incarnation is never learned
    by a model created again with the same id); ``halted`` says why the model stopped
    learning (None while it learns).
    """

    id: str
    kind: str = ""
    dim: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    features: list[str] | None = None
    version: int | None = None
    applied: int | None = None
    duplicate: int | None = None
    rejected: int | None = None
    discarded: int | None = None  # learned, then undone by rollbacks with discard_after
    updated_at: float | None = None
    partition: int | None = None
    incarnation: str | None = None
    halted: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelInfo:
        known, extra = _split(cls, data)
        known = {k: v for k, v in known.items() if v is not None}
        info = cls(**known, extra=extra)
        if info.features is None and isinstance(extra.get("assets"), list):  # an older server
            info.features = [str(a) for a in extra.pop("assets")]
        for name in ("version", "applied", "duplicate", "rejected", "discarded"):
            if getattr(info, name) is None:
                setattr(info, name, _first_int(data, f"status.{name}", f"events.{name}"))
        if info.updated_at is None:
            status = data.get("status")
            ts = status.get("updated_at") if isinstance(status, dict) else None
            info.updated_at = float(ts) if isinstance(ts, (int, float)) else None
        status = data.get("status")
        halted = status.get("halted") if isinstance(status, dict) else None
        info.halted = halted if isinstance(halted, str) else None
        return info

    @property
    def processed(self) -> int | None:
        """Events the workers have taken in: applied + duplicate + rejected."""
        if self.applied is None:
            return None
        return self.applied + (self.duplicate or 0) + (self.rejected or 0)

    def spec(self) -> dict[str, Any]:
        out = {"id": self.id, "kind": self.kind, "dim": self.dim, "params": self.params}
        if self.features:
            out["features"] = self.features
        return out

    @property
    def assets(self) -> list[str] | None:
        """The earlier name of ``features`` (an index tracker's asset tickers)."""
        return self.features


@dataclass
class Prediction:
    """One prediction: the point value, the id to label it later, classifier scores if any,
    and a classifier's probability of each class (label as a string -> p, summing to 1;
    None for regressors)."""

    value: Any
    prediction_id: str | None = None
    scores: Any = None
    probabilities: dict[str, float] | None = None
    model_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Prediction:
        known, extra = _split(cls, data)
        return cls(**known, extra=extra)


@dataclass
class PredictResponse:
    """``POST /v1/models/{id}/predict``: the predictions and the serving model version."""

    predictions: list[Prediction]
    model_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PredictResponse:
        known, extra = _split(cls, data)
        preds = [Prediction.from_json(p) for p in known.pop("predictions", [])]
        return cls(predictions=preds, **known, extra=extra)

    @property
    def values(self) -> list[Any]:
        return [p.value for p in self.predictions]


@dataclass
class EventsAccepted:
    """``202`` from the events endpoint: how many events were produced, and their ids."""

    count: int
    ids: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any], ids: list[str] | None = None) -> EventsAccepted:
        known, extra = _split(cls, data)
        count = _first_int(data, "count", "accepted", "produced")
        known.pop("count", None)
        server_ids = known.pop("ids", None)
        return cls(count=count or 0, ids=list(server_ids or ids or []), extra=extra)


@dataclass
class Quantification:
    """``POST /v1/models/{id}/quantify``: class prevalence estimates."""

    prevalence: Any
    method: str | None = None
    n: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Quantification:
        known, extra = _split(cls, data)
        if "prevalence" not in known:
            for key in ("prevalences", "estimate", "positive"):
                if key in extra:
                    known["prevalence"] = extra.pop(key)
                    break
            else:
                known["prevalence"] = None
        return cls(**known, extra=extra)


@dataclass
class Portfolio:
    """``GET /v1/models/{id}/portfolio``: the tracker's current weights by asset."""

    weights: dict[str, float]
    model_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Portfolio:
        known, extra = _split(cls, data)
        weights = known.pop("weights", {})
        if isinstance(weights, list):  # positional weights: name them by index
            weights = {str(i): w for i, w in enumerate(weights)}
        return cls(weights={str(k): float(v) for k, v in weights.items()}, **known, extra=extra)

    def top(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` largest holdings, largest first."""
        return sorted(self.weights.items(), key=lambda kv: -kv[1])[:k]


@dataclass
class Checkpoint:
    """One kept checkpoint of a model (``GET /v1/models/{id}/checkpoints``)."""

    version: int
    partition: int | None = None
    offset: int | None = None
    event_id: str | None = None
    applied: int | None = None
    ts: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        known, extra = _split(cls, data)
        return cls(**known, extra=extra)


@dataclass
class Health:
    """``/healthz`` or ``/readyz``: ``ok`` is True on a 2xx answer; ``body`` is ``{"status"}``
    only (what failed is in the API's log, docs/security.md)."""

    ok: bool
    status: int
    body: dict[str, Any] = field(default_factory=dict)
