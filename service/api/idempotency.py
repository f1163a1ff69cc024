"""The ``Idempotency-Key`` request header (IETF draft "The Idempotency-Key HTTP Header
Field", draft-ietf-httpapi-idempotency-key-header) on ``POST .../events`` and ``.../labels``.

A retry carrying the key of an earlier request gets the same event ids, so the workers'
dedupe by id drops whatever the earlier try already put on the log; the same key with
another body is refused (422, as the draft says). docs/design.md, "Idempotency-Key".
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Protocol

from fastapi import Depends, Header, Request

from service.api.errors import InvalidInput

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255

DESCRIPTION = (
    "Makes a retry safe: one unique value per operation (a UUID), sent again unchanged with"
    " every retry of it. On /events, ids the server assigns are derived from the model, this"
    " key and the event's index in the batch, so a retried batch gets the same ids and is"
    " learned once. On /labels, a retry of the accepted label is answered 'accepted' again."
    " The same key with another body is a 422. The draft's quoted sf-string"
    ' (`"8e03978e-..."`) or bare; 1-255 printable ASCII characters; remembered'
    ' `ONLINEPREDICT_IDEMPOTENCY_TTL_S` (24 h). docs/design.md, "Idempotency-Key".'
)


class KeyReused(InvalidInput):
    """The key came with another request body before (422, with this message)."""


def parse_key(raw: str) -> str:
    """The key from the header value: an RFC 8941 sf-string (``"..."`` with ``\\"`` and
    ``\\\\`` escapes), or, leniently, the bare characters (curl users rarely quote);
    ``InvalidInput`` (422) saying what is wrong otherwise."""
    value = raw.strip()
    if value.startswith('"'):
        value = _unquote(value)
    if not 1 <= len(value) <= MAX_KEY_CHARS:
        raise InvalidInput(f"{HEADER} must have 1-{MAX_KEY_CHARS} characters, got {len(value)}")
    if any(not " " <= ch <= "~" for ch in value):
        raise InvalidInput(f"{HEADER} must be printable ASCII")
    return value


def _unquote(value: str) -> str:
    """The characters of an sf-string that starts at ``value[0]`` and ends it."""
    out: list[str] = []
    chars = iter(enumerate(value[1:], start=1))
    for i, ch in chars:
        if ch == "\\":
            _, nxt = next(chars, (0, ""))
            if nxt not in ('"', "\\"):
                raise InvalidInput(f'{HEADER}: only \\" and \\\\ may be escaped')
            out.append(nxt)
        elif ch == '"':
            if i != len(value) - 1:
                raise InvalidInput(f'{HEADER}: characters after the closing "')
            return "".join(out)
        else:
            out.append(ch)
    raise InvalidInput(f"{HEADER}: an unterminated quoted string")


def key_digest(key: str) -> str:
    """SHA-256 hex of the key: its Redis key suffix, whatever characters it has."""
    return hashlib.sha256(key.encode()).hexdigest()


def derived_event_id(model: str, key: str, index: int) -> str:
    """The id of the ``index``-th event of a batch sent with ``key`` that carries no id of
    its own: 32 hex digits like the uuid4 hex assigned without a key, the same on every
    retry. The NUL separators keep ("a", "b:c") and ("a:b", "c") apart."""
    data = f"{model}\0{key}\0{index}".encode()
    return hashlib.sha256(data).hexdigest()[:32]


def fingerprint(operation: str, body: str) -> str:
    """What a retry must repeat: the operation and the parsed body (``model_dump_json``, so
    whitespace and key order of the JSON sent do not matter)."""
    return hashlib.sha256(f"{operation}\0{body}".encode()).hexdigest()


def reused_message(operation: str) -> str:
    return (
        f"{HEADER} was used before with another request body on {operation}: a key names one"
        " operation; retry it with the same body, or send a new key for a new operation"
    )


class RequestMemory(Protocol):
    async def remember_request(
        self, model: str, key_digest: str, fingerprint: str, ttl_s: int
    ) -> bool: ...


async def check_reuse(
    store: RequestMemory, model: str, key: str, operation: str, body: str, ttl_s: int
) -> None:
    """Record the first request sent with ``key`` to ``operation`` (``"events"`` or
    ``"labels"``) of ``model``; ``KeyReused`` (422) when the key came before with another
    operation or body."""
    same = await store.remember_request(model, key_digest(key), fingerprint(operation, body), ttl_s)
    if not same:
        raise KeyReused(reused_message(f"POST /v1/models/{model}/{operation}"))


async def idempotency_key(
    request: Request,
    idempotency_key: Annotated[  # documents the header in the OpenAPI schema
        str | None, Header(alias=HEADER, description=DESCRIPTION)
    ] = None,
) -> str | None:
    """The parsed key, or None without the header; 422 on a malformed or repeated header."""
    values = request.headers.getlist(HEADER)
    if not values:
        return None
    if len(values) > 1:  # the draft: clients MUST NOT send more than one
        raise InvalidInput(f"send one {HEADER} header, got {len(values)}")
    return parse_key(values[0])


IdempotencyKeyDep = Annotated[str | None, Depends(idempotency_key)]
