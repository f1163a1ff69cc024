"""Generate the provisioned Grafana dashboards (``learners.json``, ``service.json``).

Run ``python deploy/grafana/dashboards.py`` after editing; a test checks the committed JSON
is what this script writes, and evaluates every panel query against a real Prometheus.
"""

from __future__ import annotations

import json
import pathlib

OUT = pathlib.Path(__file__).parent / "dashboards"
DS = {"type": "prometheus", "uid": "prometheus"}
M = '{model=~"$model"}'

LEARNER_PANELS: list[tuple[str, str, str, str]] = [
    # title, PromQL, legend, unit
    ("Cumulative regret", f"onlinepredict_cumulative_regret{M}", "{{model}}", "short"),
    ("Cumulative loss", f"onlinepredict_cumulative_loss{M}", "{{model}}", "short"),
    ("Tracking error (RMSE)", f"onlinepredict_rmse{M}", "{{model}} {{scope}}", "short"),
    ("Tracking error (APAS TE)", f"onlinepredict_tracking_error{M}", "{{model}}", "short"),
    (
        "Events applied / s",
        'rate(onlinepredict_events_total{model=~"$model",outcome="applied"}[1m])',
        "{{model}}",
        "ops",
    ),
    (
        "Ensemble weight per discount factor",
        f"onlinepredict_ensemble_weight{M}",
        "{{model}} expert {{expert}}",
        "percentunit",
    ),
    ("APAS epsilon", f"onlinepredict_apas_epsilon{M}", "{{model}}", "short"),
    (
        "Prevalence estimate",
        f"onlinepredict_prevalence_estimate{M}",
        "{{model}} class {{class}}",
        "percentunit",
    ),
    ("Portfolio turnover", f"onlinepredict_turnover{M}", "{{model}}", "short"),
    ("Mistakes", f"onlinepredict_mistakes_total{M}", "{{model}}", "short"),
]

SERVICE_PANELS: list[tuple[str, str, str, str]] = [
    (
        "Throughput (events/s)",
        "sum by (outcome) (rate(onlinepredict_events_total[1m]))",
        "{{outcome}}",
        "ops",
    ),
    (
        "HTTP latency p50 / p99",
        "histogram_quantile(0.99, sum by (le, route) "
        "(rate(onlinepredict_http_request_duration_seconds_bucket[1m])))",
        "p99 {{route}}",
        "s",
    ),
    (
        "HTTP requests / s",
        "sum by (route, status) (rate(onlinepredict_http_request_duration_seconds_count[1m]))",
        "{{route}} {{status}}",
        "reqps",
    ),
    (
        "Update latency p99",
        "histogram_quantile(0.99, sum by (le) (rate(onlinepredict_update_seconds_bucket[1m])))",
        "p99",
        "s",
    ),
    (
        "Checkpoint latency p99",
        "histogram_quantile(0.99, sum by (le) (rate(onlinepredict_checkpoint_seconds_bucket[1m])))",
        "p99",
        "s",
    ),
    (
        "Consumer lag",
        "sum by (partition) (onlinepredict_consumer_lag)",
        "partition {{partition}}",
        "short",
    ),
    (
        "Checkpoint age",
        "max by (instance) (onlinepredict_checkpoint_age_seconds)",
        "{{instance}}",
        "s",
    ),
    ("Dead letters", "max(onlinepredict_deadletter_total)", "dead letters", "short"),
]


def _panel(i: int, title: str, expr: str, legend: str, unit: str) -> dict:  # type: ignore[type-arg]
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "datasource": DS, "expr": expr, "legendFormat": legend}],
    }


def dashboard(
    uid: str, title: str, panels: list[tuple[str, str, str, str]], with_model: bool
) -> dict:  # type: ignore[type-arg]
    templating: list[dict] = []  # type: ignore[type-arg]
    if with_model:
        templating.append(
            {
                "name": "model",
                "label": "Model",
                "type": "query",
                "datasource": DS,
                "query": {
                    "query": "label_values(onlinepredict_events_total, model)",
                    "refId": "model",
                },
                "definition": "label_values(onlinepredict_events_total, model)",
                "includeAll": True,
                "multi": True,
                "current": {"text": "All", "value": "$__all"},
                "allValue": ".*",
                "refresh": 2,
            }
        )
    return {
        "uid": uid,
        "title": title,
        "tags": ["onlinepredict"],
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {"list": templating},
        "panels": [_panel(i, *p) for i, p in enumerate(panels)],
    }


DASHBOARDS = {
    "learners.json": dashboard("onlinepredict-learners", "Learners", LEARNER_PANELS, True),
    "service.json": dashboard("onlinepredict-service", "Service", SERVICE_PANELS, False),
}


def render(board: dict) -> str:  # type: ignore[type-arg]
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for name, board in DASHBOARDS.items():
        (OUT / name).write_text(render(board))
