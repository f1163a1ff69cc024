"""``up`` against ``up --durable`` (issue 34): events learned per second end to end, JSON
records and frames, each on a fresh stack started by ``onlinepredict up`` itself.

For each mode and format: ``up [--durable] --workers 2`` on free ports (its data in a temp
dir), 4 ``pa`` models of d = 8 created through the API, then N events produced straight to
Kafka (keyed by model; JSON: one record per event; frames: 100 rows per record) and timed
from the first send until Redis says every model applied its share.

    python benchmarks/up_durable.py [--json 30000] [--frames 200000]

Prints a table (and writes benchmarks/results/up_durable.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import redis as redis_lib  # noqa: E402
from aiokafka import AIOKafkaProducer  # noqa: E402

from clients.wire import encode_frame  # noqa: E402
from service.embedded import free_port  # noqa: E402

MODELS = [f"bench-{i}" for i in range(4)]
DIM = 8
ROWS = 100  # per frame
PREFIX = "onlinepredict:"


def _records(n: int, frames: bool, seed: int = 7) -> list[tuple[bytes, bytes]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, DIM))
    y = X @ rng.normal(size=DIM) + 0.1 * rng.normal(size=n)
    per = n // len(MODELS)
    out = []
    for m, model in enumerate(MODELS):
        rows = range(m * per, (m + 1) * per)
        if frames:
            for i in range(rows.start, rows.stop, ROWS):
                part = range(i, min(i + ROWS, rows.stop))
                value = encode_frame(
                    model,
                    [f"e{j}" for j in part],
                    [X[j].tolist() for j in part],
                    [float(y[j]) for j in part],
                    [None] * len(part),
                )
                out.append((model.encode(), value))
        else:
            for j in rows:
                ev = {"model": model, "id": f"e{j}", "x": X[j].tolist(), "y": float(y[j])}
                out.append((model.encode(), json.dumps(ev).encode()))
    return out


async def _produce(bootstrap: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await producer.send("onlinepredict.events", value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def _wait(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def run_once(durable: bool, frames: bool, n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        kport, rport, aport = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONLINEPREDICT_")}
        env.update(
            PYTHONPATH=str(ROOT),
            XDG_DATA_HOME=tmp,
            ONLINEPREDICT_KAFKA_BOOTSTRAP=f"127.0.0.1:{kport}",
            ONLINEPREDICT_REDIS_URL=f"redis://127.0.0.1:{rport}/0",
            ONLINEPREDICT_API_PORT=str(aport),
            ONLINEPREDICT_METRICS_PORT="0",
        )
        args = ["up", "--workers", "2", *(["--durable"] if durable else [])]
        up = subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            api = f"http://127.0.0.1:{aport}"
            assert _wait(lambda: _answers(api), 120), "up did not come up"
            with httpx.Client(base_url=api, timeout=30) as http:
                for m in MODELS:
                    r = http.post("/v1/models", json={"id": m, "kind": "pa", "dim": DIM})
                    assert r.status_code == 201, r.text
            records = _records(n, frames)
            r = redis_lib.Redis(port=rport)
            per = n // len(MODELS)

            def done() -> bool:
                got = [r.hget(f"{PREFIX}model:{{{m}}}:state", "applied") for m in MODELS]
                return all(int(g or 0) >= per for g in got)

            t0 = time.perf_counter()
            asyncio.run(_produce(f"127.0.0.1:{kport}", records))
            assert _wait(done, 600), "not every event was learned"
            took = time.perf_counter() - t0
            r.close()
            return per * len(MODELS) / took
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(180)


def _answers(api: str) -> bool:
    try:
        return httpx.get(f"{api}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=int, default=30_000)
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--durable-only", action="store_true")
    args = ap.parse_args()
    rows = ["| mode | JSON events/s | frames events/s |", "|---|---:|---:|"]
    for durable in (True,) if args.durable_only else (False, True):
        js = run_once(durable, False, args.json)
        print(f"durable={durable} JSON {js:,.0f} events/s", flush=True)
        fr = run_once(durable, True, args.frames)
        name = "`up --durable` (s3 on localbucket)" if durable else "`up` (memory)"
        rows.append(f"| {name} | {js:,.0f} | {fr:,.0f} |")
        print(rows[-1], flush=True)
    text = (
        f"JSON {args.json:,} events, frames {args.frames:,} events ({ROWS} rows each);"
        f" 4 pa models d={DIM}, 2 workers; produce + learn, end to end\n\n" + "\n".join(rows)
    )
    print(text)
    out = ROOT / "benchmarks" / "results" / "up_durable.md"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
