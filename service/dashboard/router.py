"""Routes of the built-in dashboard: the page, its assets and its JSON feed.

The charting library (uPlot) is installed from npm at build time into
``service/dashboard/node_modules`` (``make setup``) and served from here: no CDN.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from service.api.deps import StoreDep
from service.api.security import ReadKey, principal_of
from service.embedded.demo import MODEL_ID as DEMO_MODEL
from service.metrics.exposition import ModelSnapshot
from service.metrics.snapshots import read_snapshots
from service.store.deadletters import refusing

HERE = pathlib.Path(__file__).parent
STATIC = HERE / "static"
VENDOR = HERE / "node_modules" / "uplot" / "dist"
VENDOR_FILES = {"uPlot.iife.min.js", "uPlot.min.css"}
STATIC_FILES = {"dashboard.js", "dashboard.css"}

router = APIRouter(tags=["dashboard"])


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
async def dashboard_page() -> HTMLResponse:
    """The live dashboard page."""
    if not (VENDOR / "uPlot.iife.min.js").exists():
        return HTMLResponse(
            "<p>The dashboard's charting library is not installed: run <code>make setup</code>"
            " (it runs <code>npm install</code> in service/dashboard).</p>",
            status_code=503,
        )
    return HTMLResponse((STATIC / "index.html").read_text())


@router.get("/dashboard/static/{name}", include_in_schema=False)
async def dashboard_static(name: str) -> FileResponse:
    if name not in STATIC_FILES:
        raise HTTPException(404, f"no dashboard file {name!r}")
    return FileResponse(STATIC / name)


@router.get("/dashboard/vendor/{name}", include_in_schema=False)
async def dashboard_vendor(name: str) -> FileResponse:
    if name not in VENDOR_FILES or not (VENDOR / name).exists():
        raise HTTPException(404, f"no vendored file {name!r}")
    return FileResponse(VENDOR / name)


@router.get(
    "/v1/dashboard/data",
    summary="Live figures of every model",
    dependencies=[ReadKey],
    include_in_schema=False,  # the page's feed, not part of the versioned API contract
)
async def dashboard_data(store: StoreDep, request: Request) -> dict[str, Any]:
    """Counters, running figures, diagnostics and top holdings of every model the key
    reaches (the feed of ``/dashboard``; with keys configured it needs ``read``, which the
    page asks for once and sends as X-API-Key; the page and its assets hold no data)."""
    principal = principal_of(request)
    snaps = await read_snapshots(store.redis, store.keys, with_holdings=True)
    snaps = [s for s in snaps if principal.reaches(s.model)]
    snaps.sort(key=lambda s: (s.model != DEMO_MODEL, s.model))  # the demo first, then by id
    # what GET /v1/models/{id} calls `refusing`, read the same way
    shares = await store.refused_shares([s.model for s in snaps])
    return {
        "ts": time.time(),
        "models": [
            {**s.as_json(), "status": status_of(s, *shares.get(s.model, (0, 0)))} for s in snaps
        ],
    }


def status_of(snap: ModelSnapshot, events: int, refused: int) -> str:
    """One word for the page's picker and its status filter: ``halted`` (stopped learning),
    ``refusing`` (most recent events refused, as GET /v1/models/{id} says ``refusing``),
    ``new`` (no checkpoint yet), else ``learning``."""
    if snap.halted:
        return "halted"
    if events and refusing(events, refused):
        return "refusing"
    return "new" if snap.version == 0 else "learning"
