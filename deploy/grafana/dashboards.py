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

Target = tuple[str, str]  # PromQL, legend
Panel = tuple[str, list[Target], str]  # title, targets, unit
RATE = "[$__rate_interval]"  # Grafana picks the window from the scrape interval

LEARNER_PANELS: list[Panel] = [
    ("Cumulative regret", [(f"onlinepredict_cumulative_regret{M}", "{{model}}")], "short"),
    ("Cumulative loss", [(f"onlinepredict_cumulative_loss{M}", "{{model}}")], "short"),
    ("Tracking error (RMSE)", [(f"onlinepredict_rmse{M}", "{{model}} {{scope}}")], "short"),
    ("Tracking error (APAS TE)", [(f"onlinepredict_tracking_error{M}", "{{model}}")], "short"),
    (
        "Events applied / s",
        [
            (
                f'rate(onlinepredict_events_total{{model=~"$model",outcome="applied"}}{RATE})',
                "{{model}}",
            )
        ],
        "ops",
    ),
    (
        "Ensemble weight per discount factor",
        [(f"onlinepredict_ensemble_weight{M}", "{{model}} expert {{expert}}")],
        "percentunit",
    ),
    ("APAS epsilon", [(f"onlinepredict_apas_epsilon{M}", "{{model}}")], "short"),
    (
        "Prevalence: estimate and truth",
        [
            ('onlinepredict_prevalence_estimate{model=~"$model",class="1"}', "{{model}} est."),
            (f"onlinepredict_true_prevalence{M}", "{{model}} true"),
        ],
        "percentunit",
    ),
    ("Quantification KLD", [(f"onlinepredict_quantification_kld{M}", "{{model}}")], "short"),
    ("Portfolio turnover", [(f"onlinepredict_turnover{M}", "{{model}}")], "short"),
    (
        "Excess cumulative return",
        [(f"onlinepredict_excess_cumulative_return{M}", "{{model}}")],
        "short",
    ),
    ("Active assets", [(f"onlinepredict_active_assets{M}", "{{model}}")], "short"),
    ("Mistakes", [(f"onlinepredict_mistakes_total{M}", "{{model}}")], "short"),
    ("Cumulative hinge loss", [(f"onlinepredict_cumulative_hinge_loss{M}", "{{model}}")], "short"),
]


def _quantile(q: float, metric: str, by: str) -> str:
    return f"histogram_quantile({q}, sum by (le{by}) (rate({metric}_bucket{RATE})))"


SERVICE_PANELS: list[Panel] = [
    (
        "Throughput (events/s)",
        [(f"sum by (outcome) (rate(onlinepredict_events_total{RATE}))", "{{outcome}}")],
        "ops",
    ),
    (
        "HTTP latency p50 / p99",
        [
            (
                _quantile(0.5, "onlinepredict_http_request_duration_seconds", ", route"),
                "p50 {{route}}",
            ),
            (
                _quantile(0.99, "onlinepredict_http_request_duration_seconds", ", route"),
                "p99 {{route}}",
            ),
        ],
        "s",
    ),
    (
        "HTTP requests / s",
        [
            (
                "sum by (route, status) "
                f"(rate(onlinepredict_http_request_duration_seconds_count{RATE}))",
                "{{route}} {{status}}",
            )
        ],
        "reqps",
    ),
    (
        "Update latency p50 / p99 (per learn)",
        [
            (_quantile(0.5, "onlinepredict_update_seconds", ", kind"), "p50 {{kind}}"),
            (_quantile(0.99, "onlinepredict_update_seconds", ", kind"), "p99 {{kind}}"),
        ],
        "s",
    ),
    (
        "Checkpoint latency p50 / p99",
        [
            (_quantile(0.5, "onlinepredict_checkpoint_seconds", ""), "p50"),
            (_quantile(0.99, "onlinepredict_checkpoint_seconds", ""), "p99"),
        ],
        "s",
    ),
    (
        "Consumer lag",
        [("sum by (partition) (onlinepredict_consumer_lag)", "partition {{partition}}")],
        "short",
    ),
    (
        "Checkpoint age",
        [("max by (instance) (onlinepredict_checkpoint_age_seconds)", "{{instance}}")],
        "s",
    ),
    ("Dead letters", [("max(onlinepredict_deadletter_total)", "dead letters")], "short"),
    (
        "Worker memory (RSS)",
        [
            (
                'process_resident_memory_bytes{job=~".*worker.*"}',
                "{{instance}}",
            )
        ],
        "bytes",
    ),
    (
        "Build",
        [("onlinepredict_build_info", "{{job}} {{instance}} v{{version}} py{{python}}")],
        "short",
    ),
]


def _panel(i: int, title: str, targets: list[Target], unit: str) -> dict:  # type: ignore[type-arg]
    return {
        "id": i + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + k), "datasource": DS, "expr": expr, "legendFormat": legend}
            for k, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(uid: str, title: str, panels: list[Panel], with_model: bool) -> dict:  # type: ignore[type-arg]
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
