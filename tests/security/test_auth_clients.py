"""The SDK and the CLI against a real keyed API (uvicorn in a thread, real broker and
Redis): both send ``ONLINEPREDICT_API_KEY`` from the environment; a 401 and a 403 come out
as readable errors (the SDK's ``AuthenticationError`` / ``PermissionDeniedError``, the
CLI's one line naming the scope and what to do)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from clients import AuthenticationError, Client, PermissionDeniedError
from tests.clients._client_support import ServedApi, cli

READ, ADMIN = "cli-read-Sx51", "cli-admin-Ty62"


@pytest.fixture(scope="module")
def keyed(make_settings) -> Iterator[tuple[str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    from service.api.app import create_app

    st = make_settings(api_keys=f"viewer:read:{READ},ops:admin:{ADMIN}")
    served = ServedApi(create_app(st)).start()
    env = {k: v for k, v in st.child_environment().items() if "API_KEY" not in k}
    env["ONLINEPREDICT_API_URL"] = served.url
    try:
        yield served.url, env
    finally:
        served.stop()


def test_sdk_reads_the_key_from_the_environment(keyed, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    url, _ = keyed
    model = f"sdk-{uuid.uuid4().hex[:8]}"
    monkeypatch.delenv("ONLINEPREDICT_API_KEY", raising=False)
    with Client(url) as anonymous, pytest.raises(AuthenticationError) as no_key:
        anonymous.list_models()
    assert no_key.value.status == 401 and not isinstance(no_key.value, PermissionDeniedError)
    monkeypatch.setenv("ONLINEPREDICT_API_KEY", READ)
    with Client(url) as viewer:
        viewer.list_models()  # read: allowed
        with pytest.raises(PermissionDeniedError) as denied:
            viewer.create_model(model, "pa", 2)
        assert denied.value.status == 403 and "'admin' scope" in denied.value.message
    monkeypatch.setenv("ONLINEPREDICT_API_KEY", ADMIN)
    with Client(url) as ops:
        assert ops.create_model(model, "pa", 2).id == model
        ops.delete_model(model)


def test_cli_errors_for_401_and_403_are_readable(keyed) -> None:  # type: ignore[no-untyped-def]
    _, env = keyed
    r: Any = cli("models", "list", env=env)
    assert r.returncode == 1
    assert "Error (HTTP 401): missing or wrong API key" in r.stderr
    assert "set ONLINEPREDICT_API_KEY or pass --api-key" in r.stderr
    assert "Traceback" not in r.stderr
    viewer = {**env, "ONLINEPREDICT_API_KEY": READ}
    assert cli("models", "list", env=viewer).returncode == 0
    r = cli(
        "models", "create", f"cli-{uuid.uuid4().hex[:8]}", "--kind", "pa", "--dim", "2", env=viewer
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Error (HTTP 403)" in r.stderr and "'admin' scope" in r.stderr
    assert READ not in r.stderr + r.stdout
