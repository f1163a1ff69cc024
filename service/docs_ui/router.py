"""``/docs`` (Swagger UI) and ``/redoc`` served offline.

Both UIs are installed from npm at build time into ``service/docs_ui/node_modules``
(``make setup``, or the image's node stage) and served from here: no CDN, no fonts.
"""

from __future__ import annotations

import functools
import pathlib

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

HERE = pathlib.Path(__file__).parent
MODULES = HERE / "node_modules"
# URL name -> file on disk; nothing else under node_modules is reachable.
ASSETS = {
    "swagger-ui-bundle.js": MODULES / "swagger-ui-dist" / "swagger-ui-bundle.js",
    "swagger-ui.css": MODULES / "swagger-ui-dist" / "swagger-ui.css",
    "favicon-32x32.png": MODULES / "swagger-ui-dist" / "favicon-32x32.png",
    "redoc.standalone.js": MODULES / "redoc" / "bundles" / "redoc.standalone.js",
}
PREFIX = "/docs/assets/"
# What a bundle would still fetch from the network, pointed at a local file: ReDoc's
# sidebar always shows Redocly's logo from their CDN (no option turns it off).
OFFLINE_PATCHES = {
    "redoc.standalone.js": [
        (b"https://cdn.redoc.ly/redoc/logo-mini.svg", (PREFIX + "favicon-32x32.png").encode())
    ],
}
OPENAPI_URL = "/openapi.json"
TITLE = "onlinepredict"

router = APIRouter(tags=["docs"])


def _missing(*names: str) -> HTMLResponse | None:
    if all(ASSETS[n].exists() for n in names):
        return None
    return HTMLResponse(
        "<p>The API documentation's assets are not installed: run <code>make setup</code>"
        " (it runs <code>npm install</code> in service/docs_ui). The schema itself is at"
        f' <a href="{OPENAPI_URL}">{OPENAPI_URL}</a>.</p>',
        status_code=503,
    )


@router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
async def swagger_ui() -> HTMLResponse:
    missing = _missing("swagger-ui-bundle.js", "swagger-ui.css")
    return missing or get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=f"{TITLE} - Swagger UI",
        swagger_js_url=PREFIX + "swagger-ui-bundle.js",
        swagger_css_url=PREFIX + "swagger-ui.css",
        swagger_favicon_url=PREFIX + "favicon-32x32.png",
        # no call to the public spec validator
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get("/redoc", response_class=HTMLResponse, include_in_schema=False)
async def redoc() -> HTMLResponse:
    missing = _missing("redoc.standalone.js")
    return missing or get_redoc_html(
        openapi_url=OPENAPI_URL,
        title=f"{TITLE} - ReDoc",
        redoc_js_url=PREFIX + "redoc.standalone.js",
        redoc_favicon_url=PREFIX + "favicon-32x32.png",
        with_google_fonts=False,
    )


@router.get(PREFIX + "{name}", include_in_schema=False)
async def asset(name: str) -> Response:
    path = ASSETS.get(name)
    if path is None or not path.exists():
        raise HTTPException(404, f"no documentation asset {name!r}")
    if name in OFFLINE_PATCHES:
        return Response(_patched(name, path.stat().st_mtime_ns), media_type="text/javascript")
    return FileResponse(path)


@functools.lru_cache(maxsize=len(OFFLINE_PATCHES))
def _patched(name: str, mtime_ns: int) -> bytes:
    """The asset with its network fetches made local (cached per file version)."""
    body = ASSETS[name].read_bytes()
    for old, new in OFFLINE_PATCHES[name]:
        body = body.replace(old, new)
    return body
