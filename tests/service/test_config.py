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


def test_env_example_states_the_defaults() -> None:
    """Every setting deploy/.env.example gives a value is given its default there: the file
    documents the defaults (``max_poll_records`` moved from 500 to 2,000 in both)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "deploy" / ".env.example"
    checked = set()
    for line in path.read_text().splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        field = key.removeprefix("ONLINEPREDICT_").lower()
        if not key.startswith("ONLINEPREDICT_") or field not in Settings.model_fields:
            continue  # the worker id, the log level, the CLI's own variables
        if value == "":
            continue  # unset: None (no SASL, no API key)
        stated = Settings.model_validate({field: value})
        assert getattr(stated, field) == Settings.model_fields[field].default, (key, value)
        checked.add(field)
    assert {"max_poll_records", "commit_every", "seen_ids_keep"} <= checked
