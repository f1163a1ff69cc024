"""API keys with scopes (docs/security.md, "Keys and scopes").

``ONLINEPREDICT_API_KEYS`` lists ``name:scopes:secret[:prefix]`` entries, comma-separated;
scopes are joined by ``+`` from ``read``, ``predict``, ``ingest`` and ``admin`` (admin
implies the others). ``ONLINEPREDICT_API_KEY`` adds one admin key named ``default``.
``ONLINEPREDICT_API_KEYS_FILE`` adds the entries of a file (same syntax, one or more a
line, ``#`` comments), re-read on SIGHUP and when its mtime changes (looked at no more
than once a second, on a request).

Only the SHA-256 of each secret is kept. A given secret is hashed and compared with
``hmac.compare_digest`` against every stored hash, with no early exit, so the time does
not tell which key (or how much of one) matched. With no key configured at all every
route is open (development on 127.0.0.1; ``serve`` refuses anything else).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.config import Settings

logger = logging.getLogger(__name__)

Scope = Literal["read", "predict", "ingest", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "predict", "ingest", "admin")
FILE_CHECK_INTERVAL_S = 1.0  # a request looks at the keys file's mtime at most this often

_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="Required on every /v1 route once any key is configured (docs/security.md).",
)
_bearer = HTTPBearer(auto_error=False, description="Alternative to X-API-Key.")


class KeyConfigError(ValueError):
    """A malformed key list; the message never contains a secret."""


class StartupRefused(RuntimeError):
    """The API would start open where it must not (production, or a non-loopback host)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid secret belongs to: what the routes need, never the secret."""

    name: str
    scopes: frozenset[str]
    prefix: str | None = None

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def reaches(self, model_id: str) -> bool:
        return self.prefix is None or model_id.startswith(self.prefix)


ANONYMOUS = Principal("anonymous", frozenset(SCOPES))  # no key configured: development


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal

    def __repr__(self) -> str:  # no digest either: nothing about the secret in a log
        return f"_Entry({self.principal!r})"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def parse_keys(text: str, source: str) -> list[_Entry]:
    """Entries of a key list (commas or newlines between entries, ``#`` comments); raises
    ``KeyConfigError`` naming the entry by position and name, never by secret."""
    entries: list[_Entry] = []
    items = [
        item.strip() for line in text.splitlines() for item in line.split("#", 1)[0].split(",")
    ]
    for n, item in enumerate((i for i in items if i), start=1):
        parts = item.split(":")
        name = parts[0].strip()
        where = f"{source}: entry {n}" + (f" ({name!r})" if name else "")
        if len(parts) not in (3, 4):
            raise KeyConfigError(f"{where} is not name:scopes:secret or name:scopes:secret:prefix")
        scopes = {s.strip() for s in parts[1].split("+") if s.strip()}
        secret = parts[2].strip()
        prefix = parts[3].strip() if len(parts) == 4 else None
        if not name:
            raise KeyConfigError(f"{where} has no name")
        unknown = sorted(scopes - set(SCOPES))
        if not scopes or unknown:
            raise KeyConfigError(
                f"{where}: scopes must be joined by '+' from {', '.join(SCOPES)}"
                + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        if not secret:
            raise KeyConfigError(f"{where} has an empty secret")
        if secret == "changethis":
            raise KeyConfigError(f"{where} uses the placeholder secret 'changethis'")
        if prefix == "":
            raise KeyConfigError(f"{where} has an empty prefix (leave out ':prefix' for none)")
        entries.append(_Entry(_digest(secret), Principal(name, frozenset(scopes), prefix)))
    return entries


class KeyRing:
    """The valid keys of one API process: fixed ones from the settings plus the file's,
    which ``reload`` replaces (SIGHUP, or a new mtime seen by ``maybe_reload``)."""

    def __init__(self, settings: Settings) -> None:
        fixed: list[_Entry] = []
        if settings.api_key is not None:
            secret = settings.api_key.get_secret_value()  # ('changethis': config.py refuses)
            fixed.append(_Entry(_digest(secret), Principal("default", frozenset({"admin"}))))
        if settings.api_keys is not None:
            fixed += parse_keys(settings.api_keys.get_secret_value(), "ONLINEPREDICT_API_KEYS")
        self._fixed = tuple(fixed)
        self.path = settings.api_keys_file
        # reentrant: SIGHUP's handler runs on the thread a reload may be in
        self._lock = threading.RLock()
        self._mtime: float | None = None
        self._checked = time.monotonic()
        self._entries: tuple[_Entry, ...] = self._fixed
        if self.path is not None:
            self._entries = self._fixed + tuple(self._read_file())

    def _read_file(self) -> list[_Entry]:
        assert self.path is not None
        try:
            st = os.stat(self.path)
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise KeyConfigError(
                f"ONLINEPREDICT_API_KEYS_FILE {self.path}: cannot read it ({exc.strerror})"
            ) from None
        self._mtime = st.st_mtime
        return parse_keys(text, f"ONLINEPREDICT_API_KEYS_FILE {self.path}")

    @property
    def configured(self) -> bool:
        """Any key at all (fixed, or a keys file, even an empty one: closed until filled)."""
        return bool(self._fixed) or self.path is not None

    def reload(self) -> bool:
        """Re-read the keys file; a bad file keeps the keys in force (logged, no secret)."""
        if self.path is None:
            return False
        with self._lock:
            try:
                entries = self._fixed + tuple(self._read_file())
            except KeyConfigError as exc:
                logger.error("API keys not reloaded, the previous keys stay: %s", exc)
                return False
            self._entries = entries
        logger.info("API keys reloaded from %s: %d key(s)", self.path, len(entries))
        return True

    def maybe_reload(self) -> None:
        """On a request: reload when the file's mtime changed (looked at once a second)."""
        now = time.monotonic()
        if self.path is None or now - self._checked < FILE_CHECK_INTERVAL_S:
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return  # kept as is; a reload would log why
        if mtime != self._mtime:
            self.reload()

    def authenticate(self, secret: str | None) -> Principal | None:
        """The principal of ``secret``, or None. Every stored hash is compared (no early
        exit): the time depends on the number of keys only."""
        self.maybe_reload()
        if not secret:
            return None
        given = _digest(secret)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(given, entry.digest):
                found = entry.principal
        return found


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve to anything


def startup_check(settings: Settings, ring: KeyRing) -> None:
    """Fail closed: no keyless API in production or on a non-loopback host (unless
    ``ONLINEPREDICT_ALLOW_ANONYMOUS=true``). Raises ``StartupRefused`` with one line."""
    if ring.configured:
        return
    if settings.env == "production":
        raise StartupRefused(
            "ONLINEPREDICT_ENV=production needs an API key: set ONLINEPREDICT_API_KEYS,"
            " ONLINEPREDICT_API_KEYS_FILE or ONLINEPREDICT_API_KEY (docs/security.md)"
        )
    if not _is_loopback(settings.api_host) and not settings.allow_anonymous:
        raise StartupRefused(
            f"ONLINEPREDICT_API_HOST={settings.api_host} is not a loopback address and no API"
            " key is set: set ONLINEPREDICT_API_KEYS (or ONLINEPREDICT_API_KEY), or"
            " ONLINEPREDICT_ALLOW_ANONYMOUS=true to serve it open (docs/security.md)"
        )


# ---- per request ----------------------------------------------------------------------------
def _given(request: Request) -> str | None:
    """The secret of X-API-Key, else of ``Authorization: Bearer``."""
    headers = request.headers
    key = headers.get("x-api-key")
    if key is not None:
        return key
    auth = headers.get("authorization")
    if auth is not None:
        kind, _, cred = auth.partition(" ")
        if kind.lower() == "bearer":
            return cred.strip()
    return None


def _unauthorized() -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        detail="missing or wrong API key (send it in the X-API-Key header)",
        headers={"WWW-Authenticate": "ApiKey"},
    )


def forbidden_model(principal: Principal, model_id: str) -> HTTPException:
    return HTTPException(
        status.HTTP_403_FORBIDDEN,
        detail=(
            f"the API key {principal.name!r} reaches only model ids starting with"
            f" {principal.prefix!r}, not {model_id!r}"
        ),
    )


def forbidden_all_models(name: str) -> HTTPException:
    """For a route that shows every model (e.g. ``/metrics``) and a key with a prefix."""
    return HTTPException(
        status.HTTP_403_FORBIDDEN,
        detail=f"the API key {name!r} has a model prefix; this route shows every model",
    )


def authorize(request: Request, scope: Scope, model_id: str | None = None) -> Principal:
    """The caller's principal when it holds ``scope`` (and reaches ``model_id``); else
    401 (no or wrong secret) or 403 (naming the scope, or the prefix). Sets
    ``request.state.principal``. Synchronous: the predict fast path calls it directly."""
    ring: KeyRing = request.app.state.keyring
    if not ring.configured:
        principal = ANONYMOUS
    else:
        found = ring.authenticate(_given(request))
        if found is None:
            raise _unauthorized()
        principal = found
        if not principal.allows(scope):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                detail=f"the API key {principal.name!r} lacks the {scope!r} scope this route needs",
            )
        if model_id is not None and not principal.reaches(model_id):
            raise forbidden_model(principal, model_id)
    request.state.principal = principal
    return principal


def check_predict_key(request: Request) -> None:
    """``PredictKey`` for a handler that resolves no dependencies (the predict fast path):
    the same headers, the same 401/403. No await, no dependency resolution."""
    authorize(request, "predict", request.path_params.get("model_id"))


def _dependency(scope: Scope):  # type: ignore[no-untyped-def]
    # _header/_bearer are declared so the OpenAPI document (and /docs' Authorize button)
    # shows the schemes; the check itself reads the headers once, in ``authorize``.
    async def require(
        request: Request,
        header: Annotated[str | None, Depends(_header)],
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        return authorize(request, scope, request.path_params.get("model_id"))

    require.__name__ = f"require_{scope}_key"
    return require


# Coroutines, so FastAPI runs them on the event loop instead of a thread-pool hop per request.
require_read_key = _dependency("read")
require_predict_key = _dependency("predict")
require_ingest_key = _dependency("ingest")
require_admin_key = _dependency("admin")

ReadKey = Depends(require_read_key)
PredictKey = Depends(require_predict_key)
IngestKey = Depends(require_ingest_key)
AdminKey = Depends(require_admin_key)

ROUTE_SCOPES = {
    require_read_key: "read",
    require_predict_key: "predict",
    require_ingest_key: "ingest",
    require_admin_key: "admin",
}


def principal_of(request: Request) -> Principal:
    """The principal a scope dependency set (anonymous when no key is configured)."""
    return getattr(request.state, "principal", ANONYMOUS)
