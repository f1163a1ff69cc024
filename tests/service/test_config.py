"""Settings travel to child processes through the environment, secrets included."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from service.config import Settings


def test_environment_round_trips_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    st = Settings(
        api_key=SecretStr("s3cret-key"),
        kafka_sasl_password=SecretStr("sasl-pw"),
        key_prefix="rt:",
        commit_every=7,
        api_key_on_reads=True,
    )
    env = st.environment()
    assert env["ONLINEPREDICT_API_KEY"] == "s3cret-key"  # unwrapped, not '**********'
    assert "ONLINEPREDICT_KAFKA_SASL_MECHANISM" not in env  # None falls back to the default
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Settings() == st


def test_child_environment_drops_the_parents_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    st = Settings()
    monkeypatch.setenv("ONLINEPREDICT_KAFKA_SASL_MECHANISM", "PLAIN")  # set after st was read
    monkeypatch.setenv("UNRELATED", "kept")
    env = st.child_environment(EXTRA="1")
    assert "ONLINEPREDICT_KAFKA_SASL_MECHANISM" not in env
    assert env["UNRELATED"] == "kept" and env["EXTRA"] == "1"
