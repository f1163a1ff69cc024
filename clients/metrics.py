"""Deprecated alias of :mod:`clients.figures` (this module's old name), kept so that
``from clients.metrics import ...`` still works; import ``clients.figures`` instead."""

from __future__ import annotations

import warnings

from clients.figures import (
    EXTRA_FIGURES,
    OUTCOMES,
    PREVALENCE_KEYS,
    ensemble_weights,
    event_counts,
    figures_path,
    flat_figures,
    model_entry,
    prevalence_estimate,
    summarize,
)

__all__ = [
    "EXTRA_FIGURES",
    "OUTCOMES",
    "PREVALENCE_KEYS",
    "ensemble_weights",
    "event_counts",
    "figures_path",
    "flat_figures",
    "model_entry",
    "prevalence_estimate",
    "summarize",
]

warnings.warn(
    "clients.metrics is renamed clients.figures; import clients.figures instead",
    DeprecationWarning,
    stacklevel=2,
)
