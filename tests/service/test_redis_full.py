"""Redis full is an ordinary day (issue 31, item 4), against a real capped ``redis-server``.

- The acceptance run: a flood of keyed binary predicts fills a Redis capped at 200 MB
  (``maxmemory`` + ``noeviction``, as ``service.embedded.start_redis`` starts it) until it
  refuses writes; the API answers 503 with ``Retry-After`` (never 500), Redis stays at its
  cap (over it by at most the write it admitted last), both worker processes keep running
  (their checkpoints wait, /healthz stays 200), and 1,000 events sent to another model
  meanwhile (plus re-sent ids) are learned exactly once once memory frees: the checkpoint
  equals one uninterrupted replay of the log.
- The worker's store adapter on a full Redis: a checkpoint write waits (retried with the
  same stamps), counts ``redis_oom_retries``, logs one WARNING, and lands when memory frees.
- The bound on stored predictions (``ONLINEPREDICT_MAX_PREDICTIONS``): the oldest batch is
  dropped first, and a label for it is a 404 that says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch
from service.api import create_app
from service.config import Settings
from service.embedded import free_port, start_redis
from service.embedded.stack import EmbeddedProcess, maxmemory_bytes
from service.store.keys import Keys
from tests.service.conftest import (
    WorkerProcess,
    assert_matches_replay,
    make_event,
    read_topic,
    run,
    wait_for,
)

pytestmark = pytest.mark.service

CAP = "200mb"  # the acceptance's cap
KEY = "redis-full-secret"
HEADERS = {"X-API-Key": KEY}
N_EVENTS = 1000
N_RESENT = 50
FLOOD_DIM = 100
WAIT_S = 60.0  # bounds a hang; the run takes a fraction of it


@pytest.fixture
def capped_redis() -> Iterator[EmbeddedProcess]:
    server = start_redis(maxmemory=CAP)
    try:
        yield server
    finally:
        server.stop()


def _memory(r: redis_lib.Redis) -> dict[str, Any]:
    return r.info("memory")  # type: ignore[return-value]


def _metric(port: int, name: str) -> float:
    """One sample of a worker's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_predict_flood_fills_redis_and_learning_survives_it(
    capped_redis: EmbeddedProcess, make_settings, tmp_path: Path
) -> None:
    settings: Settings = make_settings(
        redis_url=capped_redis.url,
        api_key=KEY,
        commit_every=100,
        commit_interval_s=0.3,
        consumer_session_timeout_ms=6000,
        max_poll_records=200,
        series_interval_s=0,
        redis_retry_max_s=0.5,  # learning resumes within half a second of memory freeing
    )
    r = redis_lib.Redis.from_url(capped_redis.url)
    keys = Keys(settings.key_prefix)
    cap = maxmemory_bytes(CAP)
    assert int(str(r.config_get("maxmemory")["maxmemory"])) == cap
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"

    ports = [free_port(), free_port()]
    workers = [WorkerProcess(settings, f"full-{i}", tmp_path) for i in range(2)]
    rng = np.random.default_rng(31)
    events = [
        make_event("learner", f"ev-{i}", rng.normal(size=3).tolist(), float(rng.normal()))
        for i in range(N_EVENTS)
    ]
    events += [dict(events[int(i)]) for i in rng.choice(N_EVENTS, N_RESENT, replace=False)]
    chunks = [events[i : i + 50] for i in range(0, len(events), 50)]
    statuses: dict[str, list[int]] = {"predict": [], "events": []}
    peak = 0

    def all_alive() -> bool:
        dead = [(w.name, w.proc.returncode) for w in workers if not w.alive()]  # type: ignore[union-attr]
        assert not dead, f"a worker exited: {dead}\n{workers[0].log_text()[-3000:]}"
        return True

    try:
        for w, port in zip(workers, ports, strict=True):
            w.start(ONLINEPREDICT_WORKER_METRICS_PORT=str(port))
        with TestClient(create_app(settings)) as api:
            for mid, dim in (("flood", FLOOD_DIM), ("learner", 3)):
                spec = {"id": mid, "kind": "pa", "dim": dim, "params": {}}
                assert api.post("/v1/models", json=spec, headers=HEADERS).status_code == 201

            def send_events(chunk: list[dict[str, Any]]) -> None:
                # a refused request is sent again (its ids make that safe), as clients do
                body = {"events": [{k: v for k, v in e.items() if k != "model"} for e in chunk]}
                while True:
                    resp = api.post("/v1/models/learner/events", json=body, headers=HEADERS)
                    statuses["events"].append(resp.status_code)
                    if resp.status_code == 202:
                        return
                    assert resp.status_code == 503, resp.text

            # Flood: binary batches of 5,000 x 100 (4 MB each), then smaller ones once the
            # big ones are refused, until even one row is refused: Redis is over its cap for
            # every write (a small one fits where a big one's query buffer did not).
            rows = 5000
            stored_pid = ""
            refused_one_row = False
            full_answer = None
            while not refused_one_row:
                body = encode_predict_batch(rng.normal(size=(rows, FLOOD_DIM)))
                resp = api.post(
                    "/v1/models/flood/predict",
                    content=body,
                    headers={**HEADERS, "Content-Type": PREDICT_CONTENT_TYPE},
                )
                statuses["predict"].append(resp.status_code)
                if resp.status_code == 200:
                    stored_pid = resp.json()["predictions"][0]["prediction_id"]
                assert resp.status_code in (200, 503), resp.text  # never a 500
                if resp.status_code == 503:
                    full_answer = resp
                    if rows == 1:
                        refused_one_row = True
                    rows = max(rows // 10, 1)
                if len(chunks) > 5 and len(statuses["predict"]) % 4 == 0:
                    send_events(chunks.pop(0))
                peak = max(peak, int(_memory(r)["used_memory"]))
                all_alive()
            assert full_answer is not None
            assert full_answer.headers["Retry-After"].isdigit()
            assert "Redis is full" in full_answer.json()["detail"]
            peak = max(peak, int(_memory(r)["used_memory_peak"]))

            # Held full: at the edge of the cap a small write still slips in now and then
            # (the flood's freed query buffers), so the cap is set under what Redis holds,
            # and every write is refused until the test frees memory
            r.config_set("maxmemory", int(_memory(r)["used_memory"]) - 16 * 2**20)
            # every storing request is a 503 with Retry-After, reads go on
            for path, payload in (
                ("/v1/models", {"id": "late", "kind": "pa", "dim": 2, "params": {}}),
                ("/v1/models/flood/labels", {"prediction_id": stored_pid, "y": 1.0}),
            ):
                resp = api.post(path, json=payload, headers=HEADERS)
                assert resp.status_code == 503 and "Retry-After" in resp.headers, resp.text
            assert api.get("/v1/models/learner", headers=HEADERS).status_code == 200
            while chunks:  # the rest of the events while Redis is full
                send_events(chunks.pop(0))

            # Redis full: the workers' checkpoints wait (a worker does not learn ahead of its
            # checkpoint by more than a batch), nobody exits, and their health endpoint says
            # they are waiting, not stuck
            def oom_retries() -> float:
                all_alive()
                return sum(
                    _metric(p, "onlinepredict_worker_redis_oom_retries_total") for p in ports
                )

            before = oom_retries()
            wait_for(lambda: oom_retries() >= before + 3, WAIT_S, "checkpoints refused and retried")
            waiting = [p for p in ports if _healthz(p)[1].startswith("ok: waiting")]
            assert waiting and all(_healthz(p)[0] == 200 for p in ports)
            stored = r.hmget(keys.state("learner"), "applied", "duplicate")
            assert sum(int(v or 0) for v in stored) < N_EVENTS + N_RESENT  # waiting, truly
            retries = [_metric(p, "onlinepredict_worker_redis_oom_retries_total") for p in ports]

            # Memory frees (an operator deletes the flood's predictions, the cap is back):
            # learning resumes
            flood = list(r.scan_iter(match=keys.predictions("flood", "*"), count=1000))
            assert flood
            r.delete(*flood)
            r.config_set("maxmemory", cap)
            wait_for(
                lambda: (
                    all_alive()
                    and sum(
                        int(v or 0) for v in r.hmget(keys.state("learner"), "applied", "duplicate")
                    )
                    == N_EVENTS + N_RESENT
                ),
                WAIT_S,
                "every event checkpointed once memory freed",
            )
            resp = api.post(
                "/v1/models/flood/predict",
                content=encode_predict_batch(rng.normal(size=(10, FLOOD_DIM))),
                headers={**HEADERS, "Content-Type": PREDICT_CONTENT_TYPE},
            )
            assert resp.status_code == 200, resp.text
            # a worker whose write is still in its backoff says "waiting" until that write
            # lands (at most ONLINEPREDICT_REDIS_RETRY_MAX_S later): then both say ok
            wait_for(
                lambda: all(_healthz(p) == (200, "ok\n") for p in ports),
                WAIT_S,
                "both workers' health back to ok",
            )
        codes = [w.stop() for w in workers]
        assert codes == [0, 0], codes
    finally:
        for w in workers:
            w.kill()

    n_503 = statuses["predict"].count(503)
    assert n_503 >= 2 and statuses["predict"].count(200) >= 40, statuses
    # At its cap: Redis admits a write while it is under maxmemory, so it ends over it by
    # at most that write plus the refused request's query buffer (one 4 MB batch each)
    assert peak <= cap + 2 * 5000 * FLOOD_DIM * 8 + 2**20, (peak, cap)
    logging.getLogger(__name__).info(
        "peak %d B = cap + %.1f MiB; predicts %d x 200, %d x 503; events 503: %d",
        peak,
        (peak - cap) / 2**20,
        statuses["predict"].count(200),
        n_503,
        statuses["events"].count(503),
    )
    # One WARNING when an episode starts and one INFO when it ends, not one per retry
    warned = [w.log_text().count("Redis is full (over") for w in workers]
    ended = [w.log_text().count("Redis accepts writes again") for w in workers]
    lines = [ln for w in workers for ln in w.log_text().splitlines() if "Redis" in ln]
    assert warned == ended and sum(warned) >= 1, (warned, ended, lines[-20:])
    assert sum(retries) > sum(warned), (retries, warned)

    # Exactly once: the checkpoint equals one uninterrupted replay of the log
    log = run(read_topic(settings, settings.events_topic))
    spec = json.loads(r.get(keys.spec("learner")))  # type: ignore[arg-type]
    final = assert_matches_replay(r, keys, {"learner": spec}, log)["learner"]
    assert int(final[b"applied"]) == N_EVENTS and int(final[b"duplicate"]) == N_RESENT
    r.close()


async def test_a_checkpoint_write_waits_for_memory_then_lands(
    capped_redis: EmbeddedProcess, caplog: pytest.LogCaptureFixture
) -> None:
    from redis.asyncio import Redis

    from service.store.checkpoints import OK, CheckpointWrite, Counters, Stamp
    from service.worker.adapters.redis_store import RedisStore, StopAwareRetry
    from service.worker.telemetry import WorkerStats

    r = Redis.from_url(capped_redis.url)
    keys = Keys("adapter:")
    stats = WorkerStats()
    retry = StopAwareRetry(
        stats, asyncio.Event(), stop_timeout_s=2, max_delay_s=0.05, clock=time.monotonic
    )
    store = RedisStore(r, keys, retry, worker_id="w", history_keep=2, seen_keep=10)
    await r.set(keys.spec("m"), json.dumps({"id": "m", "kind": "pa", "dim": 2, "params": {}}))
    await r.config_set("maxmemory", int((await r.info("memory"))["used_memory"]) + 4 * 2**20)
    filler = 0
    while True:  # fill to the cap with small values, so any write is refused
        try:
            await r.set(f"fill:{filler}", b"x" * 1000)
            filler += 1
        except redis_lib.exceptions.OutOfMemoryError:
            break
    write = CheckpointWrite(
        model="m",
        expected_version=0,
        stamp=Stamp(0, 41, "e41"),
        state=b"state-bytes",
        counters=Counters(applied=42, duplicate=0, rejected=0, ids_sum=0),
        topic="t",
        token="tok-1",
    )
    caplog.set_level(logging.WARNING, "service.worker.adapters.redis_store")
    task = asyncio.create_task(store.write([write], worker_stats={"applied": "42"}, deadletters=0))
    while stats.redis_oom_retries < 5:
        assert not task.done(), task.result()
        await asyncio.sleep(0.02)
    assert stats.redis_full == 1 and await r.hget(keys.state("m"), "version") is None
    await r.delete(*[f"fill:{i}" for i in range(filler)])  # memory frees
    results = await asyncio.wait_for(task, WAIT_S)
    assert [(res.outcome, res.version) for res in results] == [(OK, 1)]
    stored = await r.hmget(keys.state("m"), "offset", "event_id", "applied", "token")
    assert stored == [b"41", b"e41", b"42", b"tok-1"]  # the stamp written is the one given
    assert stats.redis_full == 0
    warnings = [rec for rec in caplog.records if "Redis is full" in rec.getMessage()]
    assert len(warnings) == 1, [rec.getMessage() for rec in caplog.records]
    await store.close()


def test_maxmemory_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.embedded import stack

    assert maxmemory_bytes("200mb") == 200 * 2**20 and maxmemory_bytes("200m") == 200 * 10**6
    assert maxmemory_bytes(" 2GB ") == 2 * 2**30 and maxmemory_bytes("0") == 0
    assert maxmemory_bytes(12345) == 12345
    for bad in ("x", "12q", "-1", "mb", "1.5gb"):
        with pytest.raises(ValueError, match="maxmemory"):
            maxmemory_bytes(bad)
    monkeypatch.setattr(stack, "physical_memory", lambda: 64 * 2**30)
    assert maxmemory_bytes("auto") == 8 * 2**30  # a quarter, at most 8 GiB
    monkeypatch.setattr(stack, "physical_memory", lambda: 512 * 2**20)
    assert maxmemory_bytes("auto") == 256 * 2**20  # at least 256 MiB
    monkeypatch.setattr(stack, "physical_memory", lambda: 8 * 2**30)
    assert maxmemory_bytes("auto") == 2 * 2**30
    monkeypatch.setenv("ONLINEPREDICT_REDIS_MAXMEMORY", "300mb")
    assert maxmemory_bytes() == 300 * 2**20  # no argument: the setting
    with pytest.raises(ValueError):
        Settings(redis_maxmemory="lots")


def test_the_session_redis_runs_capped_without_eviction(redis_client, redis_url: str) -> None:
    """The fixtures' redis-server is started as ``onlinepredict up`` starts one."""
    import os

    if os.environ.get("ONLINEPREDICT_TEST_REDIS_URL"):
        pytest.skip("an existing Redis: its configuration is not ours")
    assert redis_client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    assert int(redis_client.config_get("maxmemory")["maxmemory"]) == maxmemory_bytes()


def test_the_embedded_cluster_runs_capped_without_eviction(redis_cluster) -> None:
    """Each node holds a masters-th of the cap, so the cluster holds what one Redis would."""
    for node in redis_cluster.nodes:
        with redis_lib.Redis(host=node.host, port=node.port) as c:
            assert c.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
            assert int(c.config_get("maxmemory")["maxmemory"]) == maxmemory_bytes() // 3


def test_stored_predictions_are_bounded_per_model_oldest_first(make_settings) -> None:
    settings: Settings = make_settings(max_predictions=150, series_interval_s=0)
    keys = Keys(settings.key_prefix)
    r = redis_lib.Redis.from_url(settings.redis_url)
    with TestClient(create_app(settings)) as api:
        spec = {"id": "bounded", "kind": "pa", "dim": 3, "params": {}}
        assert api.post("/v1/models", json=spec).status_code == 201
        rng = np.random.default_rng(5)
        ids = []
        for _ in range(4):  # 400 rows, in batches of 100, against a bound of 150
            body = {"instances": rng.normal(size=(100, 3)).tolist()}
            resp = api.post("/v1/models/bounded/predict", json=body)
            assert resp.status_code == 200, resp.text
            ids.append([p["prediction_id"] for p in resp.json()["predictions"]])
        batches = [pid[0].split(".")[0] for pid in ids]
        kept = [r.exists(keys.predictions("bounded", b)) for b in batches]
        # the batches holding the newest 150 rows are kept (the last two); the others are
        # dropped, oldest first, as each new batch came
        assert kept == [0, 0, 1, 1]
        assert r.zrange(keys.predictions_index("bounded"), 0, -1) == [
            b.encode() for b in batches[2:]
        ]
        dropped = api.post("/v1/models/bounded/labels", json={"prediction_id": ids[0][7], "y": 1.0})
        assert dropped.status_code == 404 and "was dropped" in dropped.json()["detail"]
        assert "ONLINEPREDICT_MAX_PREDICTIONS" in dropped.json()["detail"]
        unknown = api.post(
            "/v1/models/bounded/labels", json={"prediction_id": "0" * 32 + ".0", "y": 1.0}
        )
        assert unknown.status_code == 404 and "unknown" in unknown.json()["detail"]
        kept_label = api.post(
            "/v1/models/bounded/labels", json={"prediction_id": ids[3][7], "y": 1.0}
        )
        assert kept_label.status_code == 202, kept_label.text
        assert api.delete("/v1/models/bounded").status_code == 204
        assert not r.exists(keys.predictions_index("bounded"), keys.dropped("bounded"))
    r.close()
