"""Each model's recent figures over time, for the dashboard (``GET /v1/models/{id}/series``).

A Redis list per model (``model:{id}:series``) of JSON points, oldest first, trimmed to a
fixed number of points on every append. Redis rather than the API's memory: the past
survives an API restart and every API replica serves the same series.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from service.store.connect import RedisClient
from service.store.keys import Keys

# The figures the dashboard draws (running statistics and last-step diagnostics); a fixed
# set keeps every point small (~300 bytes) whatever the learner reports.
SERIES_VALUES = (
    "cumulative_loss",
    "cumulative_regret",
    "rmse",
    "rmse_window",
    "tracking_error",
    "error_rate",
    "true_prevalence",
    "labelled_events",
    "epsilon",
    "prevalence_cc",
    "prevalence",
)


@dataclass(frozen=True)
class SeriesPoint:
    ts: float  # Unix time of the sample
    version: int  # checkpoint version sampled
    applied: int
    duplicate: int
    rejected: int
    values: dict[str, float | None] = field(default_factory=dict)  # None: not finite

    def to_json(self) -> str:
        return json.dumps(
            {
                "ts": self.ts,
                "version": self.version,
                "applied": self.applied,
                "duplicate": self.duplicate,
                "rejected": self.rejected,
                "values": self.values,
            },
            separators=(",", ":"),
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> SeriesPoint:
        d = json.loads(raw)
        return cls(
            ts=float(d["ts"]),
            version=int(d["version"]),
            applied=int(d["applied"]),
            duplicate=int(d["duplicate"]),
            rejected=int(d["rejected"]),
            values={str(k): None if v is None else float(v) for k, v in d["values"].items()},
        )


def pick_values(*sources: Mapping[str, float]) -> dict[str, float | None]:
    """The ``SERIES_VALUES`` found in ``sources`` (first source wins), non-finite as None."""
    out: dict[str, float | None] = {}
    for name in SERIES_VALUES:
        for src in sources:
            if name in src:
                v = float(src[name])
                out[name] = v if math.isfinite(v) else None
                break
    return out


async def append_points(
    redis: RedisClient, keys: Keys, points: Iterable[tuple[str, SeriesPoint]], capacity: int
) -> None:
    """Append ``(model, point)`` pairs and trim each list to its last ``capacity`` points,
    in one round trip."""
    pipe = redis.pipeline(transaction=False)
    for model, point in points:
        pipe.rpush(keys.series(model), point.to_json())
        pipe.ltrim(keys.series(model), -capacity, -1)
    await pipe.execute()


async def read_series(
    redis: RedisClient,
    keys: Keys,
    model: str,
    *,
    limit: int | None = None,
    since: float | None = None,
) -> list[SeriesPoint]:
    """The model's points oldest first: those after ``since`` (Unix time), the last
    ``limit`` of them. Unreadable entries (another version's format) are skipped."""
    start = -limit if limit is not None and since is None else 0
    raw: list[Any] = await redis.lrange(keys.series(model), start, -1)
    points: list[SeriesPoint] = []
    for item in raw:
        try:
            p = SeriesPoint.from_json(item)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if since is None or p.ts > since:
            points.append(p)
    return points[-limit:] if limit is not None else points
