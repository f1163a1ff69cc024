"""A live embedded stack for the observability tests: the API (``onlinepredict api``) and two
workers as subprocesses over the session's broker and Redis, four models fed continuously
through Kafka plus HTTP traffic, and a small Chrome DevTools Protocol client.

Models: ``obs-apas`` (index tracker on the S&P 500 demo panel, the ``up --demo`` stream),
``obs-dvaw`` (dvaw-ensemble), ``obs-nemsis`` (quantifier, every third event unlabelled),
``obs-arow`` (classifier). A few events of the wrong dimension go to the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.embedded import free_port
from tests._procs import terminate
from tests.service.conftest import ROOT, WorkerProcess, settings_env, wait_for

RATE_PER_MODEL = 40.0  # events/s per model: a steady stream, light on a 2-core machine
TICK_S = 0.1
DIM = 4


@dataclass
class Feed:
    """Streams events to every model until ``stop``; counts what it sent."""

    settings: Any
    api_url: str
    tickers: list[str]
    X: np.ndarray
    y: np.ndarray
    stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0
    invalid: int = 0
    http_ok: int = 0
    errors: list[str] = field(default_factory=list)

    def events(self, tick: int) -> list[tuple[str, dict[str, Any]]]:
        rng = np.random.default_rng(tick)
        per_tick = max(1, round(RATE_PER_MODEL * TICK_S))
        out: list[tuple[str, dict[str, Any]]] = []
        for j in range(per_tick):
            n = tick * per_tick + j
            t = n % len(self.y)
            out.append(("obs-apas", {"x": self.X[t].tolist(), "y": float(self.y[t])}))
            x = rng.normal(size=DIM)
            out.append(("obs-dvaw", {"x": x.tolist(), "y": float(x @ [1.0, -0.5, 0.25, 0.0])}))
            label = 1 if x[0] + 0.3 * x[1] > 0 else -1
            out.append(("obs-arow", {"x": x.tolist(), "y": label}))
            out.append(("obs-nemsis", {"x": x.tolist(), "y": None if n % 3 == 0 else label}))
            if n % 97 == 0:  # wrong dimension: dead-lettered by the worker
                out.append(("obs-arow", {"x": [1.0], "y": 1}))
        return out

    async def run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(linger_ms=5, **self.settings.kafka_options())
        await producer.start()
        try:
            async with httpx.AsyncClient(base_url=self.api_url, timeout=10) as http:
                for tick in itertools.count():
                    if self.stop.is_set():
                        break
                    started = time.monotonic()
                    for i, (model, body) in enumerate(self.events(tick)):
                        ev = {"model": model, "id": f"t{tick}-{i}", **body}
                        await producer.send(
                            self.settings.events_topic, json.dumps(ev).encode(), key=model.encode()
                        )
                        self.sent += 1
                        self.invalid += len(body["x"]) == 1
                    await self._http(http, tick)
                    await asyncio.sleep(max(0.0, TICK_S - (time.monotonic() - started)))
                await producer.flush()
        finally:
            await producer.stop()

    async def _http(self, http: httpx.AsyncClient, tick: int) -> None:
        """API traffic: predictions from every model, an event batch and a listing."""
        x = [0.1, -0.2, 0.3, 0.05]
        calls = [
            http.post("/v1/models/obs-dvaw/predict", json={"x": x}),
            http.post("/v1/models/obs-arow/predict", json={"x": x}),
            http.post("/v1/models/obs-apas/predict", json={"x": self.X[tick % 50].tolist()}),
        ]
        if tick % 5 == 0:
            calls.append(
                http.post(
                    "/v1/models/obs-dvaw/events",
                    json={"events": [{"x": x, "y": 0.05}, {"x": x, "y": 0.04}]},
                )
            )
            calls.append(http.get("/v1/models"))
        for resp in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(resp, httpx.Response) and resp.status_code < 400:
                self.http_ok += 1
            elif isinstance(resp, httpx.Response) and resp.status_code != 404:
                self.errors.append(f"{resp.request.url}: {resp.status_code} {resp.text[:200]}")

    def start(self) -> threading.Thread:
        def target() -> None:
            try:
                asyncio.run(self.run())
            except Exception as exc:  # reported by the tests
                self.errors.append(repr(exc))

        thread = threading.Thread(target=target, name="feed", daemon=True)
        thread.start()
        return thread


@dataclass
class LiveStack:
    settings: Any
    api_url: str
    api: subprocess.Popen[bytes]
    workers: list[WorkerProcess]
    worker_ports: list[int]
    feed: Feed
    feeder: threading.Thread

    def stop(self) -> None:
        self.feed.stop.set()
        self.feeder.join(20)
        for w in self.workers:
            w.stop()
        terminate(self.api, 20)


def _specs(tickers: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": "obs-apas", "kind": "apas", "dim": len(tickers), "assets": tickers},
        {"id": "obs-dvaw", "kind": "dvaw-ensemble", "dim": DIM},
        {"id": "obs-nemsis", "kind": "nemsis", "dim": DIM},
        {"id": "obs-arow", "kind": "arow", "dim": DIM},
    ]


def start_stack(make_settings: Any, log_dir: Path) -> LiveStack:
    from service.embedded.demo import panel

    settings = make_settings(
        commit_every=200,
        commit_interval_s=0.3,
        consumer_session_timeout_ms=6000,
        max_poll_records=200,
        series_interval_s=0.5,  # the dashboard's server-side history fills within seconds
    )
    api_port = free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    with open(log_dir / "api.log", "wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "api"],
            cwd=ROOT,
            env=settings_env(settings, ONLINEPREDICT_API_PORT=str(api_port)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    ports = [free_port(), free_port()]
    workers = [WorkerProcess(settings, f"obs-w{i}", log_dir) for i in range(2)]
    for w, port in zip(workers, ports, strict=True):
        w.start(ONLINEPREDICT_WORKER_METRICS_PORT=str(port))

    def api_up() -> bool:
        try:
            return httpx.get(api_url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(api_up, 60, "the API to answer")
    tickers, X, y = panel()
    for spec in _specs(tickers):
        resp = httpx.post(api_url + "/v1/models", json=spec, timeout=10)
        assert resp.status_code == 201, resp.text
    feed = Feed(settings, api_url, tickers, X, y)
    return LiveStack(settings, api_url, api, workers, ports, feed, feed.start())


class Cdp:
    """Just enough of the Chrome DevTools Protocol: call a method, await its answer."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        await self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})  # type: ignore[no-any-return]

    async def evaluate(self, expression: str) -> Any:
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res.get("result", {}).get("value")


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def start_chromium(binary: str, profile: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start headless Chromium on about:blank; returns it and its page's websocket URL."""
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(profile.parent / "chromium.log", "wb"),  # noqa: SIM115
    )
    port_file = profile / "DevToolsActivePort"
    wait_for(lambda: port_file.exists() and port_file.read_text().count("\n") >= 1, 30, "chromium")
    port = int(port_file.read_text().split()[0])
    page: dict[str, str] = {}

    def page_listed() -> bool:
        try:
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            page.update(pages[0])
        return bool(pages)

    wait_for(page_listed, 30, "chromium's page target")
    return proc, page["webSocketDebuggerUrl"]
