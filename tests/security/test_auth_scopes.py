"""Scoped API keys against the real API (real broker, real Redis): a 401/403 matrix over
every ``/v1`` route, enumerated from ``app.routes`` so a new route is covered (and must be
given a scope in ``EXPECTED``) automatically; model-id prefixes; rotation; the predict
fast path; the constant-time comparison; the dashboard feed and ``/metrics``."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.api import security as sec
from service.config import Settings

KEYS = {
    "read": "rd-secret-Qa1",
    "predict": "pr-secret-Wb2",
    "ingest": "in-secret-Ec3",
    "admin": "ad-secret-Rd4",
}
TENANT = "tn-secret-Tf5"  # admin, but only for model ids starting with PREFIX
PREFIX = "t1-"
OLD, NEW = "ops-old-Yg6", "ops-new-Uh7"  # one name, two secrets: rotation
LEGACY = "legacy-admin-Ij8"  # ONLINEPREDICT_API_KEY: one admin key named "default"

API_KEYS = ",".join(
    [f"{scope}er:{scope}:{secret}" for scope, secret in KEYS.items()]
    + [f"tenant:admin:{TENANT}:{PREFIX}", f"ops:read+predict:{OLD}", f"ops:read+predict:{NEW}"]
)

# every /v1 route and the scope it needs; a route missing here fails the matrix test
EXPECTED: dict[tuple[str, str], str] = {
    ("GET", "/v1/models"): "read",
    ("GET", "/v1/models/{model_id}"): "read",
    ("GET", "/v1/models/{model_id}/checkpoints"): "read",
    ("GET", "/v1/models/{model_id}/series"): "read",
    ("GET", "/v1/models/{model_id}/figures"): "read",
    ("GET", "/v1/models/{model_id}/metrics"): "read",
    ("GET", "/v1/models/{model_id}/portfolio"): "read",
    ("GET", "/v1/models/{model_id}/deadletters"): "read",
    ("GET", "/v1/dashboard/data"): "read",
    ("POST", "/v1/models/{model_id}/predict"): "predict",
    ("POST", "/v1/models/{model_id}/quantify"): "predict",
    ("POST", "/v1/models/{model_id}/events"): "ingest",
    ("POST", "/v1/models/{model_id}/labels"): "ingest",
    ("POST", "/v1/models/{model_id}/blocks"): "ingest",
    ("POST", "/v1/models"): "admin",
    ("DELETE", "/v1/models/{model_id}"): "admin",
    ("POST", "/v1/models/{model_id}/rollback"): "admin",
}


def v1_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every route under /v1, as the application routes them."""
    try:  # FastAPI >= 0.16x keeps included routers lazily: walk their effective routes
        from fastapi.routing import iter_route_contexts

        routes: Any = list(iter_route_contexts(app.routes))
    except ImportError:
        routes = app.routes
    found = set()
    for route in routes:
        path = getattr(route, "path", "")
        if path.startswith("/v1/") or path == "/v1":
            for method in getattr(route, "methods", None) or ():
                if method != "HEAD":
                    found.add((method, path))
    return sorted(found)


def h(secret: str | None) -> dict[str, str]:
    return {} if secret is None else {"X-API-Key": secret}


def call(c: TestClient, method: str, path: str, model: str, secret: str | None) -> Any:
    url = path.replace("{model_id}", model)
    body = {} if method == "POST" else None  # auth is checked before the body
    return c.request(method, url, json=body, headers=h(secret))


@pytest.fixture(scope="module")
def keyed(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(api_keys=API_KEYS, api_key=LEGACY)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def c(keyed: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(keyed)) as client:
        yield client


def new_model(c: TestClient, model_id: str, secret: str = KEYS["admin"]) -> str:
    r = c.post("/v1/models", json={"id": model_id, "kind": "pa", "dim": 2}, headers=h(secret))
    assert r.status_code == 201, r.text
    return model_id


def test_every_v1_route_has_a_scope(c: TestClient) -> None:
    routes = v1_routes(c.app)
    assert len(routes) >= 15  # the walk found the routes at all
    missing = [r for r in routes if r not in EXPECTED]
    assert not missing, f"give these routes a scope in EXPECTED (and the API): {missing}"
    # and each route's scope dependency is the one EXPECTED names
    try:
        from fastapi.routing import iter_route_contexts

        contexts: Any = list(iter_route_contexts(c.app.routes))
    except ImportError:
        contexts = c.app.routes
    for route in contexts:
        path = getattr(route, "path", "")
        if not path.startswith("/v1/"):
            continue
        deps = [d.dependency for d in getattr(route, "dependencies", None) or []]
        scopes = [sec.ROUTE_SCOPES[d] for d in deps if d in sec.ROUTE_SCOPES]
        for method in route.methods - {"HEAD"}:
            assert scopes == [EXPECTED[(method, path)]], (method, path, scopes)


def test_anonymous_and_wrong_keys_are_401_on_every_route(c: TestClient) -> None:
    for method, path in v1_routes(c.app):
        for secret in (None, "", "not-a-key", KEYS["admin"] + "x", KEYS["admin"][:-1]):
            r = call(c, method, path, "nosuch", secret)
            assert r.status_code == 401, (method, path, secret, r.status_code, r.text)
            assert r.headers["www-authenticate"] == "ApiKey"
            assert "X-API-Key" in r.json()["detail"]


def test_each_scope_reaches_exactly_its_routes(c: TestClient) -> None:
    for method, path in v1_routes(c.app):
        needed = EXPECTED[(method, path)]
        for scope, secret in KEYS.items():
            r = call(c, method, path, f"nosuch-{uuid.uuid4().hex[:6]}", secret)
            if scope in (needed, "admin"):
                assert r.status_code not in (401, 403), (method, path, scope, r.text)
            else:
                assert r.status_code == 403, (method, path, scope, r.status_code, r.text)
                detail = r.json()["detail"]
                assert f"'{needed}' scope" in detail and f"{scope}er" in detail, detail


def test_bearer_is_an_alternative_to_the_header(c: TestClient) -> None:
    r = c.get("/v1/models", headers={"Authorization": f"Bearer {KEYS['read']}"})
    assert r.status_code == 200
    r = c.get("/v1/models", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401


def test_prefix_key_reaches_only_its_models(c: TestClient) -> None:
    tag = uuid.uuid4().hex[:6]
    mine = new_model(c, f"{PREFIX}{tag}", TENANT)
    theirs = new_model(c, f"other-{tag}")
    # the list shows only the tenant's models; an unprefixed key sees both
    listed = {m["id"] for m in c.get("/v1/models", headers=h(TENANT)).json()["models"]}
    assert mine in listed and theirs not in listed
    assert all(m.startswith(PREFIX) for m in listed)
    everyone = {m["id"] for m in c.get("/v1/models", headers=h(KEYS["read"])).json()["models"]}
    assert {mine, theirs} <= everyone
    # create outside the prefix: 403 naming the prefix, and nothing created
    r = c.post("/v1/models", json={"id": f"x-{tag}", "kind": "pa", "dim": 2}, headers=h(TENANT))
    assert r.status_code == 403 and PREFIX in r.json()["detail"]
    assert c.get(f"/v1/models/x-{tag}", headers=h(KEYS["read"])).status_code == 404
    # every route with a model id: outside the prefix 403, inside past the check
    for method, path in v1_routes(c.app):
        if "{model_id}" not in path or method == "DELETE":
            continue
        out = call(c, method, path, theirs, TENANT)
        assert out.status_code == 403 and PREFIX in out.json()["detail"], (method, path)
        inside = call(c, method, path, mine, TENANT)
        assert inside.status_code not in (401, 403), (method, path, inside.text)
    # the dashboard feed shows only the tenant's models
    feed = c.get("/v1/dashboard/data", headers=h(TENANT)).json()["models"]
    assert all(m["id"].startswith(PREFIX) for m in feed)
    assert c.delete(f"/v1/models/{theirs}", headers=h(TENANT)).status_code == 403
    assert c.delete(f"/v1/models/{mine}", headers=h(TENANT)).status_code == 204
    assert c.delete(f"/v1/models/{theirs}", headers=h(KEYS["admin"])).status_code == 204


def test_predict_fast_paths_check_scope_and_prefix(c: TestClient) -> None:
    tag = uuid.uuid4().hex[:6]
    mine, theirs = new_model(c, f"{PREFIX}p{tag}"), new_model(c, f"other-p{tag}")
    plain = {"x": [1.0, 2.0]}  # the JSON fast path (no dependency resolution)
    for path in (f"/v1/models/{mine}/predict", f"/v1/models/{theirs}/predict"):
        assert c.post(path, json=plain).status_code == 401
        r = c.post(path, json=plain, headers=h(KEYS["read"]))
        assert r.status_code == 403 and "'predict' scope" in r.json()["detail"]
        for secret in (KEYS["predict"], KEYS["admin"], OLD):
            assert c.post(path, json=plain, headers=h(secret)).status_code != 403
    assert c.post(f"/v1/models/{theirs}/predict", json=plain, headers=h(TENANT)).status_code == 403
    assert c.post(f"/v1/models/{mine}/predict", json=plain, headers=h(TENANT)).status_code != 403
    # the binary batch body: the key is checked before the body is looked at
    bin_h = {"Content-Type": "application/vnd.onlinepredict.batch"}
    r = c.post(f"/v1/models/{mine}/predict", content=b"junk", headers=bin_h)
    assert r.status_code == 401
    r = c.post(f"/v1/models/{theirs}/predict", content=b"junk", headers={**bin_h, **h(TENANT)})
    assert r.status_code == 403
    r = c.post(
        f"/v1/models/{mine}/predict", content=b"junk", headers={**bin_h, **h(KEYS["ingest"])}
    )
    assert r.status_code == 403


def test_rotation_both_secrets_of_one_name_and_the_legacy_key(c: TestClient) -> None:
    for secret in (OLD, NEW):
        assert c.get("/v1/models", headers=h(secret)).status_code == 200
        r = c.post("/v1/models/nosuch/events", json={}, headers=h(secret))
        assert r.status_code == 403 and "'ops'" in r.json()["detail"]
    # ONLINEPREDICT_API_KEY: admin, named default
    r = c.post("/v1/models", json={"id": "Bad Id", "kind": "pa", "dim": 2}, headers=h(LEGACY))
    assert r.status_code == 422  # past the key check, judged on its body


def test_metrics_on_the_api_port_need_read_without_prefix(c: TestClient) -> None:
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers=h(KEYS["predict"])).status_code == 403
    r = c.get("/metrics", headers=h(TENANT))
    assert r.status_code == 403 and "prefix" in r.json()["detail"]
    ok = c.get("/metrics", headers=h(KEYS["read"]))
    assert ok.status_code == 200 and "onlinepredict_api_redis_up" in ok.text


def test_open_routes_stay_open_and_say_nothing(c: TestClient) -> None:
    assert c.get("/healthz").json() == {"status": "ok"}
    r = c.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    assert c.get("/dashboard").status_code in (200, 503)  # the page holds no data
    assert c.get("/openapi.json").status_code == 200
    schemes = c.get("/openapi.json").json()["components"]["securitySchemes"]
    assert "APIKeyHeader" in schemes  # /docs' Authorize button sends X-API-Key


def test_no_key_configured_is_open_even_with_an_empty_header(settings: Settings) -> None:
    with TestClient(create_app(settings)) as c:
        for headers in ({}, {"X-API-Key": ""}, {"X-API-Key": "anything"}):
            assert c.get("/v1/models", headers=headers).status_code == 200
            assert c.get("/metrics", headers=headers).status_code == 200


# ---- the key ring itself ---------------------------------------------------------------------
def test_the_app_keeps_no_secret(c: TestClient) -> None:
    held = c.app.state.settings  # type: ignore[attr-defined]
    assert held.api_key is None and held.api_keys is None  # the key ring has their hashes
    assert c.get("/v1/models", headers=h(LEGACY)).status_code == 200


def test_only_hashes_are_kept_and_every_hash_is_compared(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ring = sec.KeyRing(Settings(api_keys=API_KEYS, api_key=LEGACY))  # type: ignore[arg-type]
    entries = ring._entries  # noqa: SLF001
    assert len(entries) == len(KEYS) + 4
    shown = repr(entries) + repr(ring.__dict__)
    for secret in [*KEYS.values(), TENANT, OLD, NEW, LEGACY]:
        assert secret not in shown
        assert hashlib.sha256(secret.encode()).digest() in {e.digest for e in entries}
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(sec.hmac, "compare_digest", counting)
    first = next(iter(KEYS.values()))  # matches the first entry: no early exit
    assert ring.authenticate(first) is not None and len(calls) == len(entries)
    calls.clear()
    assert ring.authenticate("wrong") is None and len(calls) == len(entries)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a:read", "name:scopes:secret"),
        ("a:read:s:p:q", "name:scopes:secret"),
        ("a:reed:sec-Zz9", "unknown: reed"),
        ("a::sec-Zz9", "scopes must be"),
        (":read:sec-Zz9", "has no name"),
        ("a:read:", "empty secret"),
        ("a:read:sec-Zz9:", "empty prefix"),
    ],
)
def test_malformed_keys_are_refused_without_the_secret(text: str, needle: str) -> None:
    with pytest.raises(sec.KeyConfigError) as err:
        sec.KeyRing(Settings(api_keys=text))  # type: ignore[arg-type]
    assert needle in str(err.value) and "sec-Zz9" not in str(err.value)
    assert "\n" not in str(err.value)
