"""Observability end to end, on a live embedded stack (API + two workers, four models, a
continuous stream and HTTP traffic):

1. a real Prometheus (Debian's ``prometheus``) scrapes the API and both workers every
   second, and every query of every panel of every provisioned Grafana dashboard returns
   data (at least one non-NaN series);
2. headless Chromium (Debian's ``chromium``) opens the built-in ``/dashboard``: each model
   picked in turn shows the API's stored history, again after a reload, and the one shown
   updates while the stream runs; tracking error has its own axis, counts print as
   integers. (The picker with 100 models and the README's screenshot:
   ``tests/e2e/test_dashboard_models.py``.)
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.embedded.observe import start_prometheus
from tests.e2e._live import Cdp, LiveStack, start_chromium, start_stack
from tests.service.conftest import ROOT, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.service, pytest.mark.slow]

DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval is at a 1 s scrape, with margin
WAIT_S = 60.0  # bounds a hang, not a timing assertion
APPLIED = 'sum(onlinepredict_events_total{outcome="applied"})'
HISTORY = 3  # points the API must have stored before the page opens


@pytest.fixture(scope="module")
def live(make_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    log_dir = tmp_path_factory.mktemp("observability")
    stack = start_stack(make_settings, log_dir)
    try:
        yield stack
    finally:
        stack.stop()


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, PromQL with Grafana's variables substituted)."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
                out.append((path.name, panel["title"], expr.replace("$model", ".*")))
    return out


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=5)
    body = resp.json()
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]  # type: ignore[no-any-return]


def _numbers(result: list[dict[str, Any]]) -> list[float]:
    return [v for v in (float(r["value"][1]) for r in result) if not math.isnan(v)]


def test_every_dashboard_query_returns_data(live: LiveStack, tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("no `prometheus` binary (Debian package prometheus; `make system-deps`)")
    queries = panel_queries()
    assert len(queries) >= 20
    prom_proc = start_prometheus(
        live.api_url.removeprefix("http://"),
        [f"127.0.0.1:{p}" for p in live.worker_ports],
        log_path=str(tmp_path / "prometheus.log"),
    )
    prom = prom_proc.url
    try:
        empty: list[str] = []

        def all_answer() -> bool:
            empty[:] = [f"{b} / {t}: {e}" for b, t, e in queries if not _numbers(_query(prom, e))]
            return not empty

        try:
            wait_for(all_answer, WAIT_S, "every panel query to return data", interval=1.0)
        except AssertionError:
            pytest.fail("panel queries without data:\n" + "\n".join(empty))
        assert not live.feed.errors, live.feed.errors[:5]

        # the dashboards' $model variable: label_values(onlinepredict_events_total, model)
        resp = httpx.get(
            f"{prom}/api/v1/label/model/values",
            params={"match[]": "onlinepredict_events_total"},
            timeout=5,
        )
        assert {"obs-apas", "obs-dvaw", "obs-nemsis", "obs-arow"} <= set(resp.json()["data"])
        # build_info from the API and from both workers
        jobs = {r["metric"]["job"] for r in _query(prom, "onlinepredict_build_info")}
        assert jobs == {"onlinepredict-api", "onlinepredict-worker"}
        assert len(_query(prom, "onlinepredict_build_info")) == 3
        # every partition is owned by one worker: lag reported once per partition
        lag = _query(prom, "onlinepredict_consumer_lag")
        parts = [r["metric"]["partition"] for r in lag]
        assert sorted(parts) == sorted(set(parts)) and all(float(r["value"][1]) >= 0 for r in lag)
        # the workers time every applied event; the API counts the checkpointed ones, which
        # were learned before: read the API first, the workers two scrapes later
        checkpointed = _numbers(_query(prom, APPLIED))[0]
        assert checkpointed > 0

        def timed() -> float:
            return _numbers(_query(prom, "sum(onlinepredict_update_seconds_count)"))[0]

        wait_for(lambda: timed() >= checkpointed, WAIT_S, "the workers' scrapes", interval=0.5)
        deadletters = _numbers(_query(prom, "max(onlinepredict_deadletter_total)"))[0]
        assert deadletters >= 1  # the wrong-dimension events
        _report(prom, queries, live)
    finally:
        prom_proc.stop()


def _report(prom: str, queries: list[tuple[str, str, str]], live: LiveStack) -> None:
    """Print what the panels showed (``pytest -s``): one line per query."""
    print(f"\nfeed: {live.feed.sent} events sent, {live.feed.http_ok} HTTP calls answered")
    for board, title, expr in queries:
        values = _numbers(_query(prom, expr))
        print(f"{board:14s} {title[:42]:42s} n={len(values):3d} max={max(values):.4g}")


def test_builtin_dashboard_draws_and_updates(live: LiveStack, tmp_path: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("no `chromium` binary (Debian package chromium; `make system-deps`)")
    models = ["obs-apas", "obs-arow", "obs-dvaw", "obs-nemsis"]

    def history_stored() -> bool:  # the API's sampler has points for every model
        return all(
            len(httpx.get(f"{live.api_url}/v1/models/{m}/series", timeout=5).json()["points"])
            >= HISTORY
            for m in models
        )

    wait_for(history_stored, WAIT_S, f"{HISTORY} stored points per model")
    profile = tmp_path / "profile"
    profile.mkdir()
    proc, ws_url = start_chromium(binary, profile)
    try:
        opened, first, second, reloaded = asyncio.run(
            _drive(ws_url, live.api_url + "/dashboard", models)
        )
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
    for name, state in (("opened", opened), ("first", first), ("later", second)):
        print(f"\n/dashboard {name}: ticks {state['ticks']} charts {state['charts']}")
    print(f"/dashboard reloaded: history {reloaded['history']}")
    # the picker lists every model (no demo model in this stack: by id); one is shown
    assert opened["picker"] == models
    assert opened["sections"] == ["obs-apas"]  # the first one, until another is picked
    # history from the server when a model is picked, and again after a reload
    for model in models:
        chart = f"{model}/loss"
        assert first["history"].get(chart, 0) >= HISTORY, (chart, first["history"])
        # every stored point drawn, and a live point per newer checkpoint version
        assert first["charts"][chart] >= first["history"][chart]
    chart = f"{reloaded['sections'][0]}/loss"  # the model picked last, kept in the URL
    assert reloaded["sections"] == [models[-1]] and reloaded["history"][chart] >= HISTORY
    # scales apart: tracking error alone on its axis, RMSE on its own
    assert first["series"]["obs-dvaw/te"] == "tracking_error"
    assert first["series"]["obs-dvaw/rmse"] == "rmse,rmse_window"
    # counts as integers, never 501.0000
    assert {n for n, _ in second["counts"]} >= {"applied", "duplicate", "labelled_events"}
    for name, text in second["counts"]:
        assert re.fullmatch(r"\d{1,3}(,\d{3})*", text), (name, text)
    # every model has its loss chart drawn on a canvas
    for model in models:
        assert first["charts"].get(f"{model}/loss", 0) >= 2, (model, first)
    assert first["charts"]["obs-apas/regret"] >= 2 and first["charts"]["obs-dvaw/te"] >= 2
    assert first["canvases"] >= len(first["charts"])
    # and the one shown updates: more ticks, more points on every chart, figures moved on
    assert second["ticks"] > first["ticks"]
    shown = second["sections"][0]
    for chart, points in second["charts"].items():
        assert points > first["charts"][chart], chart
    assert second["loss"] != first["loss"][shown]
    # diagnostics: APAS epsilon and nemsis' prevalence charted, holdings and weights as bars
    assert first["charts"]["obs-apas/epsilon"] >= 2
    assert first["charts"]["obs-nemsis/prevalence"] >= 2
    assert "Top holdings" in first["text"]["obs-apas"]
    assert "Ensemble weights over discount factors" in first["text"]["obs-dvaw"]


PROBE = """(() => {
  const COUNTS = ['applied', 'duplicate', 'rejected', 'labelled_events', 'mistakes'];
  const charts = {}, history = {}, series = {};
  for (const box of document.querySelectorAll('.chart[data-points]')) {
    const id = box.closest('section').id.replace(/^model-/, '') + '/' + box.dataset.chart;
    charts[id] = Number(box.dataset.points);
    history[id] = Number(box.dataset.history);
    series[id] = box.dataset.series;
  }
  const b = [...document.querySelectorAll('section.model .figures span')]
    .find(e => e.textContent.startsWith('cumulative_loss'));
  const counts = [...document.querySelectorAll('.figures span[data-name]')]
    .filter(e => COUNTS.includes(e.dataset.name))
    .map(e => [e.dataset.name, e.querySelector('b').textContent]);
  return {
    ticks: Number(document.body.dataset.ticks || 0),
    history, series, counts, fresh: !window.__old,
    picker: [...document.querySelectorAll('#list button')].map(b => b.dataset.model),
    sections: [...document.querySelectorAll('section.model')].map(s => s.id.replace(/^model-/, '')),
    canvases: document.querySelectorAll('.chart canvas').length,
    charts, loss: b ? b.textContent : null, text: document.body.innerText,
  };
})()"""


async def _drive(ws_url: str, url: str, models: list[str]) -> tuple[Any, ...]:
    """The page opened, each model picked in turn (their states merged into ``first``),
    three more refreshes of the last one, and the page reloaded."""
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        await cdp.call("Page.enable")
        await cdp.call("Page.navigate", url=url)

        async def until(pred: Any, what: str) -> dict[str, Any]:
            deadline = time.monotonic() + WAIT_S
            state: dict[str, Any] = {}
            while time.monotonic() < deadline:
                state = await cdp.evaluate(PROBE) or {}
                if state and pred(state):
                    return state
                await asyncio.sleep(0.5)
            raise AssertionError(f"timed out waiting for {what}: {state}")

        opened = await until(
            lambda s: s["ticks"] >= 1 and len(s["picker"]) >= len(models) and s["charts"],
            "the first refresh",
        )
        first: dict[str, Any] = {"charts": {}, "history": {}, "series": {}, "loss": {},
                                 "text": {}, "canvases": 0}  # fmt: skip
        for model in models:
            await cdp.evaluate(f"document.querySelector('[data-model=\"{model}\"]').click()")
            state = await until(
                lambda s, m=model: (
                    s["sections"] == [m]
                    and f"{m}/loss" in s["charts"]
                    and s["charts"][f"{m}/loss"] >= 2
                ),
                f"{model}'s charts",
            )
            for key in ("charts", "history", "series"):
                first[key].update(state[key])
            first["loss"][model] = state["loss"]
            first["text"][model] = state["text"]
            first["canvases"] += state["canvases"]
            first["ticks"] = state["ticks"]
        last = state
        second = await until(
            lambda s: (
                s["ticks"] >= last["ticks"] + 3
                and all(s["charts"].get(c, 0) > n for c, n in last["charts"].items())
            ),
            "three more refreshes and a new checkpoint",
        )
        await cdp.evaluate("window.__old = true")  # marks the page the reload replaces
        await cdp.call("Page.reload", ignoreCache=True)
        reloaded = await until(
            lambda s: s["fresh"] and s["ticks"] >= 1 and s["history"],
            "the first refresh after a reload",
        )
        return opened, first, second, reloaded
