"""``/docs`` and ``/redoc`` are served from local assets: their HTML names no external host,
every asset it names is served, and without the assets a readable page says what to run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from service.docs_ui import router as docs_ui

pytestmark = pytest.mark.service

URL_ATTR = re.compile(r"""(?:src|href|url)\s*[=:(]\s*['"]?([^'")\s>]+)""")
EXTERNAL = re.compile(r"\b(?:https?:)?//[a-z0-9.-]+", re.I)


@pytest.fixture(scope="module")
def client(make_settings) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    settings: Settings = make_settings()
    with TestClient(create_app(settings)) as c:
        yield c


def _installed() -> bool:
    return all(p.exists() for p in docs_ui.ASSETS.values())


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_html_names_no_external_host(client: TestClient, page: str) -> None:
    if not _installed():
        pytest.skip("docs assets not installed (make setup)")
    resp = client.get(page)
    assert resp.status_code == 200, resp.text
    html = resp.text
    assert not EXTERNAL.findall(html), EXTERNAL.findall(html)
    urls = set(URL_ATTR.findall(html)) | set(re.findall(r"['\"](/[\w./-]+)['\"]", html))
    assets = {u for u in urls if u.startswith(docs_ui.PREFIX)}
    assert assets, html
    assert "/openapi.json" in urls
    for url in sorted(assets):
        got = client.get(url)
        assert got.status_code == 200 and got.content, url


def test_served_bundles_fetch_nothing_from_a_cdn(client: TestClient) -> None:
    """ReDoc's sidebar logo comes from Redocly's CDN in the npm bundle; the served one
    points it at a local asset (the headless check in tests/e2e sees the request)."""
    if not _installed():
        pytest.skip("docs assets not installed (make setup)")
    for name, patches in docs_ui.OFFLINE_PATCHES.items():
        on_disk = docs_ui.ASSETS[name].read_bytes()
        served = client.get(docs_ui.PREFIX + name)
        assert served.status_code == 200
        assert served.headers["content-type"].startswith("text/javascript")
        for old, new in patches:
            assert old in on_disk, f"{name} no longer has {old!r}: drop the patch"
            assert old not in served.content and new in served.content
            assert client.get(new.decode()).status_code == 200


def test_unknown_asset_is_404_not_a_file_read(client: TestClient) -> None:
    for name in ("package.json", "..%2Fpackage.json", "swagger-ui-dist%2Findex.html"):
        assert client.get(docs_ui.PREFIX + name).status_code == 404, name


def test_missing_assets_answer_a_readable_page(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # as in a checkout where `make setup` never ran: the files are not there
    absent = {name: tmp_path / name for name in docs_ui.ASSETS}
    monkeypatch.setattr(docs_ui, "ASSETS", absent)
    for page in ("/docs", "/redoc"):
        resp = client.get(page)
        assert resp.status_code == 503
        assert "make setup" in resp.text and "/openapi.json" in resp.text
