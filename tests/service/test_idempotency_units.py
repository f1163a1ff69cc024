"""The Idempotency-Key header's parsing (the draft's sf-string), the event ids derived from
it and the request fingerprint (docs/design.md, "Idempotency-Key")."""

from __future__ import annotations

import pytest

from service.api.errors import InvalidInput
from service.api.idempotency import (
    KeyReused,
    derived_event_id,
    fingerprint,
    key_digest,
    parse_key,
    reused_message,
)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('  "a b"  ', "a b"),
        (r'"say \"hi\" \\ ok"', 'say "hi" \\ ok'),
        ("x" * 255, "x" * 255),
    ],
)
def test_parse_key_takes_the_sf_string_or_bare_characters(raw: str, key: str) -> None:
    assert parse_key(raw) == key


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ('"', "unterminated"),
        ('"abc', "unterminated"),
        ('""', "1-255 characters, got 0"),
        ("", "1-255 characters, got 0"),
        ("x" * 256, "got 256"),
        (r'"a\nb"', "may be escaped"),
        ('"a"b"', "after the closing"),
        ('"a\\', "may be escaped"),
        ('"ab\\"', "unterminated"),
        ("caf\u00e9", "printable ASCII"),
        ("tab\there", "printable ASCII"),
    ],
)
def test_parse_key_refuses_malformed_values_readably(raw: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match="Idempotency-Key") as err:
        parse_key(raw)
    assert needle in str(err.value)


def test_derived_ids_are_stable_and_differ_by_model_key_and_index() -> None:
    one = derived_event_id("m1", "k", 0)
    assert one == derived_event_id("m1", "k", 0)
    assert len(one) == 32 and int(one, 16) >= 0  # the shape of a uuid4 hex
    others = {
        derived_event_id("m2", "k", 0),
        derived_event_id("m1", "k2", 0),
        derived_event_id("m1", "k", 1),
        # the separator keeps the parts apart: ("m1", "k\0" ...) is not ("m1\0k", ...)
        derived_event_id("m1\0k", "", 0),
    }
    assert one not in others and len(others) == 4
    # a pinned value: changing the derivation changes the ids retries of old requests get
    assert derived_event_id("demo", "8e03978e", 2) == "6d4f4e33df4f1cd3f79fe9e546b53887"


def test_fingerprint_tells_operations_and_bodies_apart() -> None:
    assert fingerprint("events", "{}") == fingerprint("events", "{}")
    assert fingerprint("events", "{}") != fingerprint("labels", "{}")
    assert fingerprint("events", '{"a":1}') != fingerprint("events", '{"a":2}')
    assert len(key_digest("any key { * ? }")) == 64


def test_the_reused_key_error_is_a_422_invalid_input_that_says_what_to_do() -> None:
    err = KeyReused(reused_message("POST /v1/models/m/events"))
    assert isinstance(err, InvalidInput)  # the API's InvalidInput handler answers 422
    assert not isinstance(err, ValueError)  # a ValueError is a bug's, a 500
    assert str(err) == (
        "Idempotency-Key was used before with another request body on POST /v1/models/m/events:"
        " a key names one operation; retry it with the same body, or send a new key for a new"
        " operation"
    )
