"""The HTTP API (docs/design.md, "HTTP API"): ``create_app(settings)`` and ``serve(settings)``."""

from __future__ import annotations

from service.api.app import create_app, serve

__all__ = ["create_app", "serve"]
