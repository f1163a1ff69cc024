"""Typed views of the API's JSON answers (design.md, "HTTP API").

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
    """What ``POST /v1/models`` takes: the model id, the learner kind, the dimension, params."""

    id: str
    kind: str
    dim: int
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "dim": int(self.dim), "params": self.params}


@dataclass
class ModelInfo:
    """A model as ``GET /v1/models/{id}`` shows it.

    ``applied`` is the number of events the workers have applied to the model's checkpointed
    state (None when the server does not report it); ``version`` the checkpoint version.
    """

    id: str
    kind: str = ""
    dim: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    version: int | None = None
    applied: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelInfo:
        known, extra = _split(cls, data)
        spec = data.get("spec")
        if isinstance(spec, dict):  # a server may nest the spec
            for key in ("kind", "dim", "params"):
                known.setdefault(key, spec.get(key))
        known = {k: v for k, v in known.items() if v is not None}
        info = cls(**known, extra=extra)
        if info.applied is None:
            info.applied = _first_int(
                data, "events.applied", "counters.applied", "stats.applied", "state.applied"
            )
        if info.version is None:
            info.version = _first_int(data, "state.version", "model_version")
        return info


@dataclass
class Prediction:
    """One prediction: the point value, the id to label it later, classifier scores if any."""

    value: Any
    prediction_id: str | None = None
    scores: Any = None
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
    applied: int | None = None
    ts: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        known, extra = _split(cls, data)
        return cls(**known, extra=extra)


@dataclass
class Health:
    """``/healthz`` or ``/readyz``: ``ok`` is True on a 2xx answer; ``checks`` per dependency."""

    ok: bool
    status: int
    body: dict[str, Any] = field(default_factory=dict)
