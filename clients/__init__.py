"""onlinepredict clients: the HTTP SDK, the Kafka producer helper, replay data sets, the CLI.

Imports nothing from ``learners`` or ``service``, so it installs and works on its own.

Examples
--------
>>> from clients import Client, OnlinePredictError
>>> Client.__name__, issubclass(OnlinePredictError, Exception)
('Client', True)
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Client": "clients.http",
    "AsyncClient": "clients.http",
    "RetryPolicy": "clients.http",
    "EventProducer": "clients.producer",
    "OnlinePredictError": "clients.errors",
    "NotFoundError": "clients.errors",
    "ValidationError": "clients.errors",
    "ConflictError": "clients.errors",
    "AuthenticationError": "clients.errors",
    "PermissionDeniedError": "clients.errors",
    "UnavailableError": "clients.errors",
    "RateLimitedError": "clients.errors",
    "ConnectionFailedError": "clients.errors",
    "load_dataset": "clients.datasets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # lazy, so `import clients.datasets` does not pull in httpx or aiokafka
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'clients' has no attribute {name!r}")
