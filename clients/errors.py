"""Errors raised by the SDK: each carries the server's HTTP status and message."""

from __future__ import annotations

from typing import Any


class OnlinePredictError(Exception):
    """Base class of every SDK error.

    Attributes
    ----------
    status : int or None
        The HTTP status the server answered with; None when no answer came (connection error).
    message : str
        The server's message (FastAPI's ``detail`` flattened to one readable line).
    body : Any
        The decoded response body, when there was one.
    """

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message if status is None else f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body


class BadRequestError(OnlinePredictError):
    """400: the request was malformed."""


class AuthenticationError(OnlinePredictError):
    """401: the API key is missing or wrong (and 403, as `PermissionDeniedError`)."""


class PermissionDeniedError(AuthenticationError):
    """403: a valid API key without the route's scope (named in the message), or a model id
    outside the key's prefix."""


class NotFoundError(OnlinePredictError):
    """404: unknown model, prediction id or route."""


class ConflictError(OnlinePredictError):
    """409: the model exists already, or does not support the operation."""


class PayloadTooLargeError(OnlinePredictError):
    """413: the body exceeds the server's limits, or the request its cost budget
    (ONLINEPREDICT_MAX_REQUEST_COST: the message says how many rows fit)."""


class RateLimitedError(OnlinePredictError):
    """429: over the key's rate limit (ONLINEPREDICT_RATE_LIMITS); idempotent calls are
    retried after the answer's Retry-After first."""


class ValidationError(OnlinePredictError):
    """422: bad shapes or values (wrong dimension, NaN, inf, bad spec)."""


class UnavailableError(OnlinePredictError):
    """503: Kafka or Redis is down; retried automatically for idempotent calls."""


class ServerError(OnlinePredictError):
    """Any other 5xx answer."""


class ConnectionFailedError(OnlinePredictError):
    """No HTTP answer at all: refused connection, DNS failure or timeout."""


_BY_STATUS: dict[int, type[OnlinePredictError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
    503: UnavailableError,
}


def detail_message(body: Any, fallback: str = "") -> str:
    """Flatten a FastAPI error body (``{"detail": str | [{"loc", "msg"}, ...]}``) to one line."""
    detail = body.get("detail", body.get("message", body)) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                msg = str(item.get("msg", item))
                parts.append(f"{loc}: {msg}" if loc else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts) or fallback
    if detail is None or detail == "":
        return fallback
    return str(detail)


def error_for_status(status: int, body: Any, reason: str = "") -> OnlinePredictError:
    """The SDK error for a non-2xx answer.

    Examples
    --------
    >>> err = error_for_status(404, {"detail": "unknown model 'x'"})
    >>> type(err).__name__, err.status, err.message
    ('NotFoundError', 404, "unknown model 'x'")
    """
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else OnlinePredictError)
    return cls(detail_message(body, reason or f"HTTP {status}"), status=status, body=body)
