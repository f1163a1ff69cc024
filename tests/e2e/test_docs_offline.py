"""Headless Chromium (Debian's ``chromium``) opens ``/docs`` and ``/redoc`` on a live API:
the operations are rendered from the local assets and no request leaves localhost."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from service.docs_ui import router as docs_ui
from service.embedded import free_port
from tests._procs import terminate
from tests.e2e._live import Cdp, start_chromium
from tests.service.conftest import ROOT, settings_env, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.service, pytest.mark.slow]

WAIT_S = 60.0  # bounds a hang, not a timing assertion
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# what each UI draws last, awaited before the requests are judged: ReDoc's sidebar logo
# (fetched from Redocly's CDN unless the served bundle points it here)
LAST_DRAWN = {
    "/docs": "true",
    "/redoc": "(i => !!i && i.complete)(document.querySelector('img[alt=\"redocly logo\"]'))",
}
# the text of an operation's path, as each UI renders it
PROBES = {
    # a deprecated operation's path has its own class (/v1/models/{id}/figures)
    "/docs": "[...document.querySelectorAll("
    "'.opblock-summary-path, .opblock-summary-path__deprecated')].map(e => e.textContent)",
    "/redoc": "[...document.querySelectorAll('[data-section-id^=\"operation/\"]')]"
    ".map(e => e.textContent)",
}


class RecordingCdp(Cdp):
    """A ``Cdp`` that keeps the URL of every request the page sends."""

    def __init__(self, ws: Any) -> None:
        super().__init__(ws)
        self.urls: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        import json

        msg_id = next(self.ids)
        await self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("method") == "Network.requestWillBeSent":
                self.urls.append(msg["params"]["request"]["url"])
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def api_url(make_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("docs") / "api.log"
    with open(log, "wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "api"],
            cwd=ROOT,
            env=settings_env(make_settings(), ONLINEPREDICT_API_PORT=str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "the API to answer")
        yield url
    finally:
        api.terminate()
        api.wait(20)


async def _rendered(
    ws_url: str, url: str, probe: str, expected: int, last: str
) -> tuple[list[str], list[str]]:
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        cdp = RecordingCdp(ws)
        await cdp.call("Network.enable")
        await cdp.call("Page.enable")
        await cdp.call("Page.navigate", url=url)
        deadline = time.monotonic() + WAIT_S
        paths: list[str] = []
        while time.monotonic() < deadline:
            paths = await cdp.evaluate(probe) or []
            # every operation of the schema is on the page (the UIs render progressively)
            done = len(paths) >= expected and any("/v1/models" in p for p in paths)
            if done and await cdp.evaluate(last):
                return paths, cdp.urls
            await asyncio.sleep(0.5)
        raise AssertionError(f"{len(paths)}/{expected} operations at {url}; requests {cdp.urls}")


@pytest.mark.parametrize("page", sorted(PROBES))
def test_docs_render_offline(api_url: str, page: str, tmp_path: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("no `chromium` binary (Debian package chromium; `make system-deps`)")
    if not all(p.exists() for p in docs_ui.ASSETS.values()):
        pytest.skip("docs assets not installed (make setup)")
    schema = httpx.get(api_url + "/openapi.json", timeout=10).json()
    expected = sum(len(ops) for ops in schema["paths"].values())
    profile = tmp_path / "profile"
    profile.mkdir()
    proc, ws_url = start_chromium(binary, profile)
    try:
        paths, urls = asyncio.run(
            _rendered(ws_url, api_url + page, PROBES[page], expected, LAST_DRAWN[page])
        )
    finally:
        terminate(proc, 10)
    print(f"\n{page}: {len(paths)} operations, requests {[u[:80] for u in urls]}")
    assert expected >= 10 and len(paths) >= expected, paths
    assert any(u.endswith("/openapi.json") for u in urls), urls
    outside = [
        u
        for u in urls
        if urlsplit(u).scheme in ("http", "https", "ws", "wss")
        and urlsplit(u).hostname not in LOCAL_HOSTS
    ]
    assert not outside, f"requests left localhost: {outside}"
