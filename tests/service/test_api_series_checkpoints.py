"""``GET /v1/models/{id}/series?checkpoints=true`` (docs/design.md, "HTTP API"): a model fed
in one burst checkpoints several versions between two samples of the API's sampler; the
kept checkpoints fill them in, each at its own write time with figures from its own
statistics, so the dashboard draws the burst's course rather than one point.
Real Redis and broker of the session; the sampler driven with a fixed clock."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.service._api_helpers import pa_with_weights, write_state
from tests.service.test_api_series import create, points, sample, stats_blob

pytestmark = pytest.mark.service

BURST = 6  # checkpoints written between two samples (ONLINEPREDICT_HISTORY_KEEP is 10)


@pytest.fixture(scope="module")
def api_settings(make_settings: Any) -> Settings:
    return make_settings(series_interval_s=0, series_points=5)  # type: ignore[no-any-return]


def burst(client: TestClient, settings: Settings) -> str:
    """BURST checkpoints, 10 events each, and one sample after the last."""
    mid = create(client)
    learner, version = pa_with_weights([0.0, 0.0, 0.0]), 0
    for i in range(1, BURST + 1):
        version = write_state(
            settings, mid, learner, version, offset=i, applied=10 * i, stats=stats_blob(10 * i)
        )
    sample(settings, {}, 4_000_000_000.0)  # after every checkpoint's write time
    return mid


def test_kept_checkpoints_fill_in_a_burst(client: TestClient, api_settings: Settings) -> None:
    mid = burst(client, api_settings)
    (sampled,) = points(client, mid)  # the sampler saw the last version only
    assert sampled["version"] == BURST
    full = points(client, mid, checkpoints="true")
    assert [p["version"] for p in full] == list(range(1, BURST + 1))
    assert [p["applied"] for p in full] == [10 * i for i in range(1, BURST + 1)]
    # a sampled version is listed once, at its checkpoint's write time (before the sample)
    assert {**full[-1], "ts": sampled["ts"]} == sampled and full[-1]["ts"] < sampled["ts"]
    # each point's figures are its own checkpoint's (stats of 10 i steps), not the last one's
    assert [p["values"]["labelled_events"] for p in full] == [10.0 * i for i in range(1, 7)]
    assert len({p["values"]["cumulative_loss"] for p in full}) == BURST
    # the checkpoints carry their write time: before the sample, in version order
    ts = [p["ts"] for p in full]
    assert ts == sorted(ts)


def test_limit_and_since_apply_to_the_merged_points(
    client: TestClient, api_settings: Settings
) -> None:
    mid = burst(client, api_settings)
    full = points(client, mid, checkpoints="true")
    assert [p["version"] for p in points(client, mid, checkpoints="true", limit=2)] == [5, 6]
    since = full[2]["ts"]
    assert [p["version"] for p in points(client, mid, checkpoints="true", since=since)] == [
        p["version"] for p in full if p["ts"] > since
    ]
    assert points(client, mid, checkpoints="false") == points(client, mid)


def test_a_bad_checkpoints_flag_is_a_readable_422(client: TestClient) -> None:
    mid = create(client)
    r = client.get(f"/v1/models/{mid}/series?checkpoints=maybe")
    assert r.status_code == 422 and "checkpoints" in r.json()["detail"]
    assert client.get(f"/v1/models/{mid}/series?checkpoints=true").json()["points"] == []
