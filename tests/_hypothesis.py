"""Hypothesis settings shared by the tests that fuzz the API with schemathesis strategies."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings


def api_fuzz_settings(max_examples: int, **more: Any) -> settings:
    """Reproducible settings for cases sent to a real API: derandomized, no example database,
    no deadline (a call does real I/O) and no health checks; ``more`` adds or overrides
    settings."""
    return settings(
        **{
            "max_examples": max_examples,
            "derandomize": True,
            "deadline": None,
            "database": None,
            "suppress_health_check": list(HealthCheck),
            **more,
        }
    )
