"""Exposition of per-model figures in the Prometheus text format."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.metrics.exposition import ModelSnapshot, SnapshotCollector


def _render(snaps: list[ModelSnapshot], deadletters: int = 0) -> dict[str, list]:  # type: ignore[type-arg]
    reg = CollectorRegistry()
    reg.register(SnapshotCollector(snaps, deadletters))  # type: ignore[arg-type]
    text = generate_latest(reg).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_events_and_regret_are_exposed_per_model() -> None:
    fams = _render(
        [
            ModelSnapshot(
                "m1",
                "apas",
                counters={"applied": 7, "duplicate": 1},
                figures={"cumulative_regret": 2.5, "rmse": 0.1, "rmse_window": 0.2},
                diagnostics={"epsilon": 0.01, "weight_0": 0.3},
            ),
            ModelSnapshot("m2", "arow", counters={"applied": 3}, figures={"mistakes": 2}),
        ],
        deadletters=4,
    )
    events = {
        (s.labels["model"], s.labels["outcome"]): s.value for s in fams["onlinepredict_events"]
    }
    assert events[("m1", "applied")] == 7 and events[("m1", "duplicate")] == 1
    assert events[("m2", "rejected")] == 0
    assert [s.value for s in fams["onlinepredict_cumulative_regret"]] == [2.5]
    scopes = {s.labels["scope"]: s.value for s in fams["onlinepredict_rmse"]}
    assert scopes == {"cumulative": 0.1, "window": 0.2}
    assert fams["onlinepredict_apas_epsilon"][0].value == 0.01
    assert fams["onlinepredict_ensemble_weight"][0].labels["expert"] == "0"
    assert fams["onlinepredict_mistakes"][0].value == 2
    assert fams["onlinepredict_deadletter"][0].value == 4
