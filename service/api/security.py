"""Optional API key (``ONLINEPREDICT_API_KEY``), compared in constant time."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.config import Settings

_header = APIKeyHeader(
    name="X-API-Key", auto_error=False, description="Required when ONLINEPREDICT_API_KEY is set."
)
_bearer = HTTPBearer(auto_error=False, description="Alternative to X-API-Key.")


def _check(settings: Settings, header: str | None, bearer: HTTPAuthorizationCredentials | None):
    if settings.api_key is None:
        return
    given = header if header is not None else (bearer.credentials if bearer else None)
    expected = settings.api_key.get_secret_value().encode()
    # compare_digest on bytes of any length: the time does not depend on where they differ.
    if given is None or not hmac.compare_digest(given.encode(), expected):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing or wrong API key (send it in the X-API-Key header)",
            headers={"WWW-Authenticate": "ApiKey"},
        )


# Coroutines, so FastAPI runs them on the event loop instead of a thread-pool hop per request.
async def require_write_key(
    request: Request,
    header: Annotated[str | None, Depends(_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    _check(request.app.state.settings, header, bearer)


async def require_read_key(
    request: Request,
    header: Annotated[str | None, Depends(_header)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    settings: Settings = request.app.state.settings
    if settings.api_key_on_reads:
        _check(settings, header, bearer)


async def check_read_key(request: Request) -> None:
    """``require_read_key`` for a handler that resolves no dependencies (the predict fast
    path): the same header extraction, the same 401."""
    settings: Settings = request.app.state.settings
    if settings.api_key_on_reads:
        _check(settings, await _header(request), await _bearer(request))


WriteKey = Depends(require_write_key)
ReadKey = Depends(require_read_key)
