"""Prometheus exposition of the per-model learning metrics.

The API's ``/metrics`` reads every model's checkpointed counters and running statistics
from Redis and turns them into metric families here, so the figures are the same
whichever worker owns a model. Labels stay bounded: ``model``, ``outcome``, ``scope``,
``name`` (a learner's fixed diagnostic keys) and ``expert`` (the ensemble's grid index).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from service.metrics.running import prevalence_estimate

PREFIX = "onlinepredict_"
OUTCOMES = ("applied", "duplicate", "rejected")


@dataclass
class ModelSnapshot:
    """What Redis holds for one model: its counters and running figures."""

    model: str
    kind: str
    version: int = 0  # of the checkpoint read (0 before the first)
    counters: dict[str, int] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)
    holdings: list[tuple[str, float]] = field(default_factory=list)  # index trackers only
    halted: bool = False  # the model stopped learning (service/worker/divergence.py)
    # the share of its recent events it refused (service/worker/refusals.py); None: none
    refused_share: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The model's figures as the JSON routes give them (``/v1/models/{id}/metrics``,
        the dashboard's feed): holdings as ``[asset, weight]`` pairs."""
        return {
            "id": self.model,
            "kind": self.kind,
            "version": self.version,
            "counters": self.counters,
            "figures": self.figures,
            "diagnostics": self.diagnostics,
            "holdings": [[name, weight] for name, weight in self.holdings],
        }


# figure name -> (metric suffix, help, extra labels)
_GAUGES: dict[str, tuple[str, str, dict[str, str]]] = {
    "cumulative_loss": ("cumulative_loss", "Cumulative loss of the learner's predictions.", {}),
    "cumulative_regret": (
        "cumulative_regret",
        "Cumulative squared-loss regret against the best fixed linear predictor in hindsight.",
        {},
    ),
    "tracking_error": (
        "tracking_error",
        "Tracking error sqrt(sum e^2)/n (APAS paper eq. 13).",
        {},
    ),
    "rmse": ("rmse", "Root mean squared prediction error.", {"scope": "cumulative"}),
    "rmse_window": ("rmse", "Root mean squared prediction error.", {"scope": "window"}),
    "excess_cumulative_return": (
        "excess_cumulative_return",
        "Sum of log(1 + portfolio return) - log(1 + index return).",
        {},
    ),
    "turnover_total": ("turnover", "Cumulative portfolio turnover sum ||w_t+1 - w_t||_1.", {}),
    "cumulative_hinge_loss": ("cumulative_hinge_loss", "Cumulative hinge loss.", {}),
    "error_rate": ("error_rate", "Fraction of labelled events misclassified.", {}),
    "true_prevalence": ("true_prevalence", "Positive-class prevalence among labels.", {}),
    "quantification_kld": (
        "quantification_kld",
        "Smoothed KLD between true and estimated prevalence.",
        {},
    ),
}


#: every figure a model may report, with its meaning (the JSON route's typed schema)
FIGURE_HELP: dict[str, str] = {
    "labelled_events": "Labelled events learned.",
    "mistakes": "Misclassified labelled events.",
    **{name: help_ for name, (_, help_, _) in _GAUGES.items()},
}


def model_families(snapshots: Iterable[ModelSnapshot]) -> Iterator[Metric]:
    """Metric families for every model snapshot."""
    snaps = list(snapshots)
    events = CounterMetricFamily(
        PREFIX + "events", "Events by outcome.", labels=["model", "outcome"]
    )
    mistakes = CounterMetricFamily(
        PREFIX + "mistakes", "Misclassified labelled events.", labels=["model"]
    )
    gauges: dict[str, GaugeMetricFamily] = {}
    diag = GaugeMetricFamily(
        PREFIX + "learner_diagnostic",
        "The learner's last-step diagnostics (APAS epsilon, ensemble weights, ...).",
        labels=["model", "kind", "name"],
    )
    epsilon = GaugeMetricFamily(PREFIX + "apas_epsilon", "APAS threshold.", labels=["model"])
    weights = GaugeMetricFamily(
        PREFIX + "ensemble_weight",
        "Weight of each discount factor in the ensemble.",
        labels=["model", "expert"],
    )
    prevalence = GaugeMetricFamily(
        PREFIX + "prevalence_estimate",
        "Estimated class prevalence.",
        labels=["model", "class"],
    )
    active = GaugeMetricFamily(
        PREFIX + "active_assets", "Assets with weight above 1e-6.", labels=["model"]
    )
    halted = GaugeMetricFamily(
        PREFIX + "model_halted",
        "1 when the model stopped learning because its log diverged further back than its"
        " dedupe window reaches (its status says why).",
        labels=["model"],
    )
    refused = GaugeMetricFamily(
        PREFIX + "model_refused_share",
        "The share of the model's recent events (the last 100 or more its worker decided)"
        " it refused; absent while it refused none since its worker loaded it.",
        labels=["model"],
    )
    for s in snaps:
        for outcome in OUTCOMES:
            events.add_metric([s.model, outcome], float(s.counters.get(outcome, 0)))
        halted.add_metric([s.model], float(s.halted))
        if s.refused_share is not None:
            refused.add_metric([s.model], s.refused_share)
        if "mistakes" in s.figures:
            mistakes.add_metric([s.model], s.figures["mistakes"])
        for name, value in s.figures.items():
            if name not in _GAUGES:
                continue
            suffix, help_text, extra = _GAUGES[name]
            fam = gauges.get(suffix)
            if fam is None:
                fam = GaugeMetricFamily(
                    PREFIX + suffix, help_text, labels=["model", *sorted(extra)]
                )
                gauges[suffix] = fam
            fam.add_metric([s.model, *(extra[k] for k in sorted(extra))], value)
        for name, value in sorted(s.diagnostics.items()):
            diag.add_metric([s.model, s.kind, name], value)
            if name == "epsilon" and s.kind == "apas":
                epsilon.add_metric([s.model], value)
            elif name.startswith("weight_"):
                weights.add_metric([s.model, name.removeprefix("weight_")], value)
            elif name in ("active_assets", "active"):
                active.add_metric([s.model], value)
        est = prevalence_estimate(s.diagnostics)
        if est is not None:
            prevalence.add_metric([s.model, "1"], est)
            prevalence.add_metric([s.model, "-1"], 1.0 - est)
    yield events
    yield mistakes
    yield from gauges.values()
    yield from (diag, epsilon, weights, prevalence, active, halted, refused)


class SnapshotCollector:
    """A one-shot collector over already-fetched snapshots (for a per-request registry)."""

    def __init__(self, snapshots: Iterable[ModelSnapshot], deadletters: int) -> None:
        self._snapshots = list(snapshots)
        self._deadletters = deadletters

    def collect(self) -> Iterator[Metric]:
        yield from model_families(self._snapshots)
        dl = CounterMetricFamily(PREFIX + "deadletter", "Events sent to the dead-letter topic.")
        dl.add_metric([], float(self._deadletters))
        yield dl
