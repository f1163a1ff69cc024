"""The built-in ``/dashboard`` with 100 models, in headless Chromium (Debian's ``chromium``)
against a real API and worker on the session's broker and Redis:

- the picker lists all 100; search, the kind filter and the status filter narrow it;
- the models fed in one burst (a few hundred events learned by a real worker in a few
  checkpoints, between two of the API's 5 s samples) draw one point per kept checkpoint
  version (``/series?checkpoints=true``), not a single sample;
- every chart is titled by what it draws (a regressor's tracking error is not "APAS"'s);
- the ensemble's weights name each discount factor once (gammas near 1 used to print
  as 0.999999 twice);
- the x axis switches to events applied.

With ``ONLINEPREDICT_SCREENSHOT=1`` it refreshes ``docs/dashboard.png`` (the README's).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.embedded import free_port
from service.store.series import SeriesPoint, append_points
from tests._procs import terminate
from tests.e2e._live import Cdp, start_chromium
from tests.service._api_helpers import redis_call
from tests.service.conftest import ROOT, WorkerProcess, settings_env, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.service, pytest.mark.slow]

SCREENSHOT = ROOT / "docs" / "dashboard.png"
WAIT_S = 30.0  # bounds a hang, not a timing assertion
MODELS = 100
KINDS = ["pa", "arow", "dvaw-ensemble", "nemsis", "rls"]
DIM = 3  # dvaw-ensemble's default grid at d = 3 has gammas 0.9999993 and 0.9999997
BURST = 300  # events per fed model, in REQUESTS requests (one record, a frame, each)
REQUESTS = 6
FED = {"m000-pa", "m001-arow", "m002-dvaw-ensemble", "m003-nemsis"}
OLD, OLD_POINTS = "m005-pa", 40  # a series spread over three days (time labels with dates)


def model_ids() -> list[str]:
    return [f"m{i:03d}-{KINDS[i % len(KINDS)]}" for i in range(MODELS)]


def burst(model: str, rng: np.random.Generator) -> list[dict[str, Any]]:
    X = rng.normal(size=(BURST, DIM))
    if model.endswith(("arow", "nemsis")):
        y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, -1).tolist()
    else:
        y = (X @ [1.0, -0.5, 0.25] + 0.1 * rng.normal(size=BURST)).tolist()
    return [{"x": x, "y": v} for x, v in zip(X.tolist(), y, strict=True)]


@pytest.fixture(scope="module")
def api_url(make_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API's URL, after 100 models, FED's bursts learned and OLD's three days of past."""
    log_dir = tmp_path_factory.mktemp("dashboard")
    # a batch per record and a checkpoint per batch: a burst passes through several
    # versions within a second or two, between two of the API's samples (5 s, the default)
    settings = make_settings(commit_every=BURST // REQUESTS, max_poll_records=1)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_dir / "api.log", "wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "api"],
            cwd=ROOT,
            env=settings_env(settings, ONLINEPREDICT_API_PORT=str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    worker = WorkerProcess(settings, "dash-w", log_dir)
    try:
        with worker.running():

            def api_up() -> bool:
                try:
                    return httpx.get(url + "/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for(api_up, 60, "the API to answer")
            asyncio.run(_populate(url))

            def learned() -> bool:
                got = [httpx.get(f"{url}/v1/models/{m}", timeout=5).json() for m in FED]
                return all((g.get("status") or {}).get("applied") == BURST for g in got)

            wait_for(learned, 60, "the worker to learn every burst")
            redis_call(settings, _three_days)
            yield url
    finally:
        terminate(api, 20)


async def _three_days(redis: Any, keys: Any) -> None:
    """OLD's series as the API's sampler would have stored it over three days."""
    start = time.time() - 3 * 86400
    points = [
        SeriesPoint(
            ts=start + i * 3 * 86400 / OLD_POINTS,
            version=i + 1,
            applied=100 * (i + 1),
            duplicate=0,
            rejected=0,
            values={"cumulative_loss": float(i), "rmse": 1.0 / (i + 1)},
        )
        for i in range(OLD_POINTS)
    ]
    await append_points(redis, keys, [(OLD, p) for p in points], OLD_POINTS)


async def _populate(url: str) -> None:
    rng = np.random.default_rng(34)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        sem = asyncio.Semaphore(8)

        async def create(mid: str) -> None:
            kind = mid.split("-", 1)[1]
            async with sem:
                r = await http.post("/v1/models", json={"id": mid, "kind": kind, "dim": DIM})
            assert r.status_code == 201, r.text

        await asyncio.gather(*(create(m) for m in model_ids()))
        for mid in sorted(FED):
            events, n = burst(mid, rng), BURST // REQUESTS
            for i in range(REQUESTS):
                r = await http.post(
                    f"/v1/models/{mid}/events", json={"events": events[i * n : (i + 1) * n]}
                )
                assert r.status_code == 202, r.text


PICKER = """(() => ({
  ticks: Number(document.body.dataset.ticks || 0),
  count: document.getElementById('count').textContent,
  items: [...document.querySelectorAll('#list button')].map(b => [b.dataset.model,
          b.dataset.status, b.querySelector('small').textContent]),
  selected: (document.querySelector('section.model') || {}).id || null,
}))()"""

FILTER = """((search, kind, state) => {
  const set = (id, v) => { const e = document.getElementById(id); e.value = v;
                           e.dispatchEvent(new Event('input')); };
  set('search', search); set('kind', kind); set('state', state);
  return [...document.querySelectorAll('#list button')].map(b => b.dataset.model);
})"""

DETAIL = """(() => {
  const s = document.querySelector('section.model');
  if (!s) return null;
  const charts = {};
  for (const b of s.querySelectorAll('.chart[data-points]'))
    charts[b.dataset.chart] = { title: b.querySelector('h3').textContent, data: b.dataset.title,
      series: b.dataset.series, points: Number(b.dataset.points),
      history: Number(b.dataset.history), x: b.dataset.x,
      canvas: !!b.querySelector('canvas') };
  const weights = [...s.querySelectorAll('.bars')].filter(e => e.querySelector('h3')
      .textContent.startsWith('Ensemble weights'))
    .flatMap(e => [...e.querySelectorAll('.bar .label')].map(l => l.textContent));
  return { id: s.id.replace(/^model-/, ''), charts, weights,
           head: s.querySelector('h2').textContent };
})()"""

# each chart's x tick labels as drawn: [text, centre in CSS px, width in CSS px]
TICKS = """(() => {
  const ctx = document.createElement('canvas').getContext('2d'), out = {};
  for (const [key, u] of window.dashboardCharts) {
    const a = u.axes[0];
    ctx.font = a.font[0];
    out[key] = { scale: [u.scales.x.min, u.scales.x.max, u.bbox.width / devicePixelRatio],
      labels: (a._values || []).map((v, i) => [v, u.valToPos(a._splits[i], 'x')])
        .filter(t => t[0] !== null)
        .map(([v, x]) => [String(v), x, ctx.measureText(String(v)).width / devicePixelRatio]) };
  }
  return out;
})()"""


def readable(ticks: dict[str, dict[str, Any]]) -> None:
    """Every chart has x labels (one, when a burst spans a fraction of a second), each
    printed once and as precise as the tick step, none overlapping the next."""
    assert ticks
    for key, axis in ticks.items():
        labels = axis["labels"]
        texts = [t[0] for t in labels]
        assert texts and len(set(texts)) == len(texts), (key, axis)
        lo, hi, _ = axis["scale"]
        if hi - lo < 1:  # within a second: the labels say which fraction of it
            assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{1,3}", t) for t in texts), (key, axis)
        for (_, x0, w0), (_, x1, w1) in zip(labels, labels[1:], strict=False):
            assert x1 - x0 > (w0 + w1) / 2 + 4, (key, axis)  # 4 px between labels at least


# each series' words in its chart's title (dashboard.js LABELS)
WORDS = {
    "cumulative_regret": "regret",
    "cumulative_loss": "loss",
    "rmse": "RMSE over all events",
    "rmse_window": "RMSE over the last window",
    "tracking_error": "√(Σe²)/n",
    "error_rate": "error rate",
    "applied": "events applied",
    "epsilon": "ε",
    "prevalence": "prevalence estimate",
    "true_prevalence": "true prevalence",
}


def test_dashboard_with_100_models(api_url: str, tmp_path: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("no `chromium` binary (Debian package chromium; `make system-deps`)")
    feed = httpx.get(api_url + "/v1/dashboard/data", timeout=10).json()["models"]
    assert len(feed) == MODELS
    assert {m["id"] for m in feed if m["status"] == "learning"} == FED
    assert {m["status"] for m in feed if m["id"] not in FED} == {"new"}
    dvaw = next(m for m in feed if m["id"] == "m002-dvaw-ensemble")["diagnostics"]
    gammas = [v for k, v in dvaw.items() if k.startswith("gamma_")]
    # the case that printed one gamma twice: distinct factors, equal at 6 decimals
    assert len(set(gammas)) == len(gammas) > len({f"{g:.6f}" for g in gammas})
    sampled = httpx.get(f"{api_url}/v1/models/m002-dvaw-ensemble/series", timeout=5).json()
    profile = tmp_path / "profile"
    profile.mkdir()
    proc, ws_url = start_chromium(binary, profile)
    try:
        res = asyncio.run(_drive(ws_url, api_url + "/dashboard#model=m002-dvaw-ensemble"))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    picker, filtered, ensemble, by_applied, others, ticks, png = res
    # the picker: every model, the demo first then by id (no demo here)
    assert picker["count"] == f"{MODELS} of {MODELS} models"
    assert [i[0] for i in picker["items"]] == model_ids()
    assert picker["selected"] == "model-m002-dvaw-ensemble"  # from the URL's #model=
    assert (
        filtered["search"] == [m for m in model_ids() if "m04" in m]
        and len(filtered["search"]) == 10
    )
    assert filtered["kind"] == [m for m in model_ids() if m.endswith("-arow")]
    assert filtered["search+kind"] == [m for m in model_ids() if "m04" in m and "arow" in m]
    assert filtered["learning"] == sorted(FED)
    assert len(filtered["new"]) == MODELS - len(FED)
    assert filtered["none"] == [] and filtered["count"] == f"0 of {MODELS} models"
    assert len(filtered["cleared"]) == MODELS
    # the burst-fed ensemble: a point per kept checkpoint version, where the sampler has one
    # or two at most
    loss = ensemble["charts"]["loss"]
    assert loss["history"] >= 3 > len(sampled["points"]), (loss, sampled)
    assert loss["points"] >= loss["history"] and loss["canvas"]
    # charts titled by what they draw, none a regressor's "APAS" chart
    assert {"regret", "loss", "rmse", "te", "applied"} <= set(ensemble["charts"])
    for key, c in ensemble["charts"].items():
        assert c["title"] == c["data"] and c["title"].endswith(" over time"), c
        for s in c["series"].split(","):
            assert WORDS[s].lower() in c["title"].lower(), (key, c)
        assert "APAS" not in c["title"], c
    assert ensemble["charts"]["te"]["title"] == "Tracking error √(Σe²)/n over time"
    # every expert once, each by a label of its own
    assert len(ensemble["weights"]) == len(gammas)
    assert len(set(ensemble["weights"])) == len(gammas), ensemble["weights"]
    # events applied on the x axis: the same points, titled so, no applied-by-applied chart
    assert "applied" not in by_applied["charts"]
    for c in by_applied["charts"].values():
        assert c["x"] == "applied" and c["title"].endswith(" by events applied"), c
    assert by_applied["charts"]["loss"]["points"] == loss["points"]
    # a classifier and a quantifier: their own charts, titled by their own series
    arow, nemsis = others
    assert arow["charts"]["error"]["title"] == "Error rate over time"
    assert "te" not in arow["charts"] and "regret" not in arow["charts"]
    assert nemsis["charts"]["error"]["history"] >= 3
    # readable time axes: a burst's sub-second ticks, and three days with the dates
    (tmp_path / "three-days.png").write_bytes(base64.b64decode(ticks.pop("days_png")))
    readable(ticks["burst"])
    readable(ticks["days"])
    days = [t[0] for t in ticks["days"]["loss"]["labels"]]
    assert any(re.match(r"[A-Z][a-z]{2} \d{1,2} \d\d:\d\d$", d) for d in days), days
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    (tmp_path / "dashboard.png").write_bytes(png)
    if os.environ.get("ONLINEPREDICT_SCREENSHOT") == "1":
        SCREENSHOT.write_bytes(png)


async def _drive(ws_url: str, url: str) -> tuple[Any, ...]:
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        cdp = Cdp(ws)
        await cdp.call("Page.enable")
        # tall enough for the screenshot to show the ensemble's charts and weights
        await cdp.call(
            "Emulation.setDeviceMetricsOverride",
            width=1400,
            height=1150,
            deviceScaleFactor=1,
            mobile=False,
        )
        await cdp.call("Page.navigate", url=url)

        async def until(expr: str, pred: Any, what: str) -> Any:
            deadline = time.monotonic() + WAIT_S
            state: Any = None
            while time.monotonic() < deadline:
                state = await cdp.evaluate(expr)
                if state and pred(state):
                    return state
                await asyncio.sleep(0.2)
            raise AssertionError(f"timed out waiting for {what}: {state}")

        picker = await until(
            PICKER, lambda s: len(s["items"]) == MODELS and s["selected"], "the picker"
        )
        ensemble = await until(
            DETAIL, lambda s: "loss" in s["charts"] and s["weights"], "the ensemble's charts"
        )

        async def filt(search: str, kind: str, state: str) -> list[str]:
            return await cdp.evaluate(f"{FILTER}({search!r}, {kind!r}, {state!r})")  # type: ignore[no-any-return]

        filtered = {
            "search": await filt("m04", "", ""),
            "kind": await filt("", "arow", ""),
            "search+kind": await filt("m04", "arow", ""),
            "learning": await filt("", "", "learning"),
            "new": await filt("", "", "new"),
            "none": await filt("no-such-model", "", ""),
        }
        filtered["count"] = await cdp.evaluate("document.getElementById('count').textContent")
        filtered["cleared"] = await filt("", "", "")

        await cdp.evaluate(
            "(() => { const e = document.getElementById('xaxis'); e.value = 'applied';"
            " e.dispatchEvent(new Event('change')); })()"
        )
        by_applied = await until(
            DETAIL,
            lambda s: s["charts"] and all(c["x"] == "applied" for c in s["charts"].values()),
            "charts by events applied",
        )
        await cdp.evaluate(
            "(() => { const e = document.getElementById('xaxis'); e.value = 'time';"
            " e.dispatchEvent(new Event('change')); })()"
        )
        others = []
        for mid, chart in (("m001-arow", "error"), ("m003-nemsis", "error")):
            await cdp.evaluate(f"document.querySelector('[data-model=\"{mid}\"]').click()")
            others.append(
                await until(
                    DETAIL,
                    lambda s, mid=mid, chart=chart: s["id"] == mid and chart in s["charts"],
                    f"{mid}'s charts",
                )
            )
        ticks = {"burst": await cdp.evaluate(TICKS)}  # m003-nemsis: fed in one burst
        await cdp.evaluate(f"document.querySelector('[data-model=\"{OLD}\"]').click()")
        await until(
            DETAIL,
            lambda s: s["id"] == OLD and s["charts"].get("loss", {}).get("points") == OLD_POINTS,
            "three days of one model",
        )
        ticks["days"] = await cdp.evaluate(TICKS)
        days = await cdp.call("Page.captureScreenshot", format="png")
        ticks["days_png"] = days["data"]  # kept beside the test's other files, to look at
        # the screenshot: the ensemble over time, its weights and the picker
        await cdp.evaluate("document.querySelector('[data-model=\"m002-dvaw-ensemble\"]').click()")
        await until(
            DETAIL,
            lambda s: s["id"] == "m002-dvaw-ensemble" and "te" in s["charts"] and s["weights"],
            "the ensemble again",
        )
        shot = await cdp.call("Page.captureScreenshot", format="png")
        png = base64.b64decode(shot["data"])
        return picker, filtered, ensemble, by_applied, others, ticks, png
