"""A model's figures as JSON from ``GET /v1/models/{id}/metrics`` (docs/design.md, "HTTP
API"; the dashboard's feed ``/v1/dashboard/data`` has the same entry for every model): its
``counters`` (applied, duplicate, rejected), running ``figures``
(the values ``/metrics`` exports: cumulative loss and regret, rmse, error rate ...), the
learner's last-step ``diagnostics`` and an index tracker's top ``holdings``.

The SDK and the CLI read these, not the Prometheus text of ``/metrics`` (that is for
scrapers).
"""

from __future__ import annotations

import math
from typing import Any


def figures_path(quoted_model: str) -> str:
    return f"/v1/models/{quoted_model}/metrics"


OUTCOMES = ("applied", "duplicate", "rejected")
# diagnostics that hold a quantifier's estimated positive-class prevalence, in the order the
# service's /metrics picks them (service/metrics/running.py; not imported: clients/ stands alone)
PREVALENCE_KEYS = ("prevalence", "prevalence_estimate", "prevalence_cc")
EXTRA_FIGURES = (
    "tracking_error",
    "excess_cumulative_return",
    "true_prevalence",
    "quantification_kld",
)


def model_entry(body: Any, model: str) -> dict[str, Any]:
    """The model's entry of a ``/v1/models/{id}/metrics`` answer (one model) or of a
    ``/v1/dashboard/data`` answer (every model); empty parts when it is not there.

    Examples
    --------
    >>> body = {"models": [{"id": "m", "kind": "pa", "counters": {"applied": 3}}]}
    >>> model_entry(body, "m")["counters"], model_entry(body, "x")["figures"]
    ({'applied': 3}, {})
    """
    if isinstance(body, dict) and "models" not in body:
        body = {"models": [body]}  # one model's /metrics
    models = body.get("models", []) if isinstance(body, dict) else []
    entry = next((m for m in models if isinstance(m, dict) and m.get("id") == model), {})
    return {
        "id": model,
        "kind": entry.get("kind"),
        "version": entry.get("version"),  # the model route has it, the dashboard's feed does not
        "listed": bool(entry),
        "counters": dict(entry.get("counters") or {}),
        "figures": dict(entry.get("figures") or {}),
        "diagnostics": dict(entry.get("diagnostics") or {}),
        "holdings": list(entry.get("holdings") or []),
    }


def event_counts(entry: dict[str, Any]) -> dict[str, int]:
    """Events by outcome (applied, duplicate, rejected)."""
    counters = entry.get("counters") or {}
    return {o: int(counters[o]) for o in OUTCOMES if counters.get(o) is not None}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def prevalence_estimate(diagnostics: dict[str, Any]) -> float | None:
    for key in PREVALENCE_KEYS:
        if (value := _number(diagnostics.get(key))) is not None:
            return value
    return None


def ensemble_weights(entry: dict[str, Any]) -> dict[str, float]:
    """An ensemble's weight by expert (its ``weight_<expert>`` diagnostics)."""
    return {
        name.removeprefix("weight_"): float(value)
        for name, value in (entry.get("diagnostics") or {}).items()
        if name.startswith("weight_") and _number(value) is not None
    }


def summarize(entry: dict[str, Any]) -> dict[str, float | int | None]:
    """A model's headline figures: events, rmse or mistakes, cumulative loss and regret.

    ``rmse`` is the server's cumulative ``rmse`` when reported; otherwise it is derived as
    sqrt(cumulative_loss / events), the same figure for regressors because their loss is
    the squared error (docs/design.md, learner contract). Classifiers report ``mistakes``.
    ``events`` is None for a model the API does not list.

    Examples
    --------
    >>> entry = {"counters": {"applied": 4, "duplicate": 1, "rejected": 0},
    ...          "figures": {"cumulative_loss": 16.0, "cumulative_regret": -2.5}}
    >>> s = summarize(entry)
    >>> s["events"], s["duplicates"], s["rmse"], s["cumulative_regret"]
    (4, 1, 2.0, -2.5)
    """
    counts = event_counts(entry)
    figures = entry.get("figures") or {}
    events = counts.get("applied")
    loss = _number(figures.get("cumulative_loss"))
    mistakes = _number(figures.get("mistakes"))
    summary: dict[str, float | int | None] = {
        "events": events,
        "duplicates": counts.get("duplicate", 0),
        "rejected": counts.get("rejected", 0),
        "cumulative_loss": loss,
        "cumulative_regret": _number(figures.get("cumulative_regret")),
    }
    if mistakes is not None:
        summary["mistakes"] = int(mistakes)
        rate = _number(figures.get("error_rate"))
        summary["error_rate"] = (
            rate if rate is not None else (mistakes / events if events else None)
        )
    else:
        rmse = _number(figures.get("rmse"))
        if rmse is None and loss is not None and events:
            rmse = math.sqrt(loss / events)
        summary["rmse"] = rmse
    for extra in EXTRA_FIGURES:
        if (value := _number(figures.get(extra))) is not None:
            summary[extra] = value
    prevalence = prevalence_estimate(entry.get("diagnostics") or {})
    if prevalence is not None:
        summary["prevalence_estimate"] = prevalence
    return summary


def flat_figures(entry: dict[str, Any]) -> dict[str, float]:
    """Every number reported for the model, for a generic view: its figures and its event
    counters as ``events_<outcome>``."""
    out = {f"events_{o}": float(n) for o, n in event_counts(entry).items()}
    for name, value in (entry.get("figures") or {}).items():
        if (number := _number(value)) is not None:
            out[name] = number
    return out
