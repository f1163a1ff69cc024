"""A small reader of the Prometheus text format, enough for a model's figures on ``/metrics``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
PREFIX = "onlinepredict_"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = math.nan


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus exposition.

    Examples
    --------
    >>> s = parse_samples('a_total{model="m",outcome="applied"} 3.0\\n# HELP x y\\nb 1e-3')
    >>> [(x.name, x.labels.get("outcome"), x.value) for x in s]
    [('a_total', 'applied', 3.0), ('b', None, 0.001)]
    """
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = {
            k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m[3] or "")
        }
        try:
            value = float(m[4])
        except ValueError:
            continue
        out.append(Sample(m[1], labels, value))
    return out


def model_samples(text: str, model: str) -> list[Sample]:
    """The samples labelled with ``model``, prefix ``onlinepredict_`` stripped from the names."""
    out = []
    for s in parse_samples(text):
        if s.labels.get("model") == model:
            name = s.name[len(PREFIX) :] if s.name.startswith(PREFIX) else s.name
            out.append(Sample(name, {k: v for k, v in s.labels.items() if k != "model"}, s.value))
    return out


def _pick(samples: list[Sample], name: str) -> float | None:
    """A metric's value, preferring the cumulative sample when several label sets exist."""
    matches = [s for s in samples if s.name == name]
    if not matches:
        return None
    for s in matches:
        if not s.labels or "cumulative" in s.labels.values() or s.labels.get("window") == "all":
            return s.value
    return matches[0].value


def event_counts(samples: list[Sample]) -> dict[str, float]:
    """``events_total`` by outcome (applied, duplicate, rejected)."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name in ("events_total", "events"):
            key = s.labels.get("outcome", "total")
            out[key] = out.get(key, 0.0) + s.value
    return out


def summarize(samples: list[Sample]) -> dict[str, float | int | None]:
    """A model's headline figures: events, rmse or mistakes, cumulative loss and regret.

    ``rmse`` is the server's cumulative ``rmse`` when exported; otherwise it is derived as
    sqrt(cumulative_loss / events), the same figure for regressors because their loss is
    the squared error (docs/design.md, learner contract). Classifiers report ``mistakes``.
    """
    counts = event_counts(samples)
    events = counts.get("applied")
    loss = _pick(samples, "cumulative_loss")
    mistakes = _pick(samples, "mistakes_total")
    summary: dict[str, float | int | None] = {
        "events": int(events) if events is not None else None,
        "duplicates": int(counts.get("duplicate", 0)),
        "rejected": int(counts.get("rejected", 0)),
        "cumulative_loss": loss,
        "cumulative_regret": _pick(samples, "cumulative_regret"),
    }
    if mistakes is not None:
        summary["mistakes"] = int(mistakes)
        rate = _pick(samples, "error_rate")
        summary["error_rate"] = (
            rate if rate is not None else (mistakes / events if events else None)
        )
    else:
        rmse = _pick(samples, "rmse")
        if rmse is None and loss is not None and events:
            rmse = math.sqrt(loss / events)
        summary["rmse"] = rmse
    for extra in (
        "tracking_error",
        "excess_cumulative_return",
        "true_prevalence",
        "quantification_kld",
    ):
        value = _pick(samples, extra)
        if value is not None:
            summary[extra] = value
    prevalence = [s.value for s in samples if s.name == "prevalence_estimate"]
    positive = [
        s.value
        for s in samples
        if s.name == "prevalence_estimate" and s.labels.get("class") in ("1", "+1")
    ]
    if positive or prevalence:
        summary["prevalence_estimate"] = (positive or prevalence)[0]
    return summary


def scalar_gauges(samples: list[Sample]) -> dict[str, float]:
    """Every model sample as ``name{labels}`` -> value, for a generic view."""
    out = {}
    for s in samples:
        suffix = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{suffix}}}" if suffix else s.name] = s.value
    return out
