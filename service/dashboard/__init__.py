"""The built-in live dashboard (``GET /dashboard``) for the embedded stack."""

from __future__ import annotations

from service.dashboard.router import router

__all__ = ["router"]
