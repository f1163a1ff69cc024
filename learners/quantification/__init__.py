"""Online quantification: NEMSIS and SCAN (Kar et al., KDD 2016), measures and estimators.

The measures of ``docs/algorithms/nemsis.md`` are pure functions named after them
(``kld(p, p_hat, n_samples)`` with the paper's smoothing; ``ba``, ``nss``, ``cqreward`` ...
from confusion counts ``(tp, fp, fn, tn)``; ``*_rates`` from (TPR, TNR, p)). The learners
are kinds ``nemsis`` and ``scan``; prevalence estimators CC / ACC / PCC / PACC are in
``estimators`` and selectable through ``quantify(X, method=...)``.

Defaults (``nemsis`` ``measure="q"``, ``method="pacc"``) come from the artificial-prevalence
benchmark in ``benchmarks/README.md``; the paper's configuration is ``PAPER_MEASURE`` with
``PAPER_METHOD`` (``measure="negkld"``, ``method="cc"``).
"""

from __future__ import annotations

from learners.quantification.estimators import (
    DEFAULT_METHOD,
    METHODS,
    PAPER_METHOD,
    Calibration,
    acc,
    cc,
    pacc,
    pcc,
)
from learners.quantification.measures import (
    all_measures,
    ba,
    ba_rates,
    bakld,
    bakld_rates,
    ber,
    ber_rates,
    bkreward,
    bkreward_rates,
    cc_prevalence_rates,
    confusion_counts,
    cqb,
    cqb_rates,
    cqreward,
    cqreward_rates,
    kld,
    kld_counts,
    kld_rates,
    min_tpr_tnr,
    min_tpr_tnr_rates,
    negkld,
    nss,
    nss_rates,
    q_beta,
    q_beta_combine,
    q_beta_rates,
    rates_from_counts,
    smooth,
    smoothing_eps,
)
from learners.quantification.nemsis import DEFAULT_MEASURE, PAPER_MEASURE

__all__ = [
    "DEFAULT_MEASURE",
    "DEFAULT_METHOD",
    "METHODS",
    "PAPER_MEASURE",
    "PAPER_METHOD",
    "Calibration",
    "acc",
    "all_measures",
    "ba",
    "ba_rates",
    "bakld",
    "bakld_rates",
    "ber",
    "ber_rates",
    "bkreward",
    "bkreward_rates",
    "cc",
    "cc_prevalence_rates",
    "confusion_counts",
    "cqb",
    "cqb_rates",
    "cqreward",
    "cqreward_rates",
    "kld",
    "kld_counts",
    "kld_rates",
    "min_tpr_tnr",
    "min_tpr_tnr_rates",
    "negkld",
    "nss",
    "nss_rates",
    "pacc",
    "pcc",
    "q_beta",
    "q_beta_combine",
    "q_beta_rates",
    "rates_from_counts",
    "smooth",
    "smoothing_eps",
]
