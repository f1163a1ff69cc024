"""The figures a checkpoint carries for its readers (``/metrics``, ``/v1/models/{id}/metrics``,
the dashboard and its series sampler).

The worker computes them when it writes the checkpoint (``ModelRuntime.checkpoint_write``)
and stores them as JSON in the state hash's ``figures`` field (docs/design.md, "Redis
keys"), so a reader parses a few hundred bytes per model instead of decoding the running
statistics and solving their d x d regret system on every scrape. One JSON object:
``{"figures": {name: value}, "diagnostics": {name: value}, "holdings": [[asset, weight]]}``,
non-finite values left out (JSON has none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import learners
from service.metrics.running import RunningStats

TOP_HOLDINGS = 10  # an index tracker's largest positions kept with its figures
INDEX_TRACKER_KINDS = frozenset({"apas"})  # or a learner class with ``index_tracker = True``


@dataclass
class Figures:
    figures: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)
    holdings: list[tuple[str, float]] = field(default_factory=list)


def is_index_tracker(kind: str) -> bool:
    """A learner whose weights are a portfolio (``/portfolio``, holdings)."""
    cls = learners.REGISTRY.get(kind)
    return cls is not None and (
        kind in INDEX_TRACKER_KINDS or bool(getattr(cls, "index_tracker", False))
    )


def asset_names(features: Sequence[str] | None, dim: int) -> list[str]:
    """An index tracker's asset names: its spec's ``features``, else ``x0``, ``x1``, ..."""
    return list(features) if features else [f"x{i}" for i in range(dim)]


def top_holdings(
    weights: np.ndarray, names: Sequence[str], top: int = TOP_HOLDINGS
) -> list[tuple[str, float]]:
    """The ``top`` largest positive positions, largest first (ties by name)."""
    pairs = [(str(n), float(w)) for n, w in zip(names, weights, strict=True)]
    held = [(n, w) for n, w in pairs if math.isfinite(w) and w > 1e-6]
    return sorted(held, key=lambda nw: (-nw[1], nw[0]))[:top]


def of_model(
    stats: RunningStats, learner: learners.Learner, features: Sequence[str] | None
) -> Figures:
    """What a checkpoint of this model carries (holdings for an index tracker)."""
    holdings: list[tuple[str, float]] = []
    if is_index_tracker(learner.kind):
        w = np.asarray(learner.weights, dtype=np.float64)  # type: ignore[attr-defined]
        holdings = top_holdings(w, asset_names(features, len(w)))
    return Figures(_finite(stats.figures()), _finite(stats.last), holdings)


def encode(figures: Figures) -> bytes:
    body = {
        "figures": figures.figures,
        "diagnostics": figures.diagnostics,
        "holdings": [[n, w] for n, w in figures.holdings],
    }
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def decode(raw: bytes | str) -> Figures:
    """Raises ``ValueError`` when ``raw`` is not what :func:`encode` writes."""
    body: Any = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("figures: not a JSON object")
    return Figures(
        {str(k): float(v) for k, v in dict(body.get("figures") or {}).items()},
        {str(k): float(v) for k, v in dict(body.get("diagnostics") or {}).items()},
        [(str(n), float(w)) for n, w in body.get("holdings") or []],
    )


def _finite(values: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if math.isfinite(v)}
