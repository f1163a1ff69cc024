"""Aggregative prevalence estimators CC, ACC, PCC, PACC (``docs/algorithms/nemsis.md``).

Pure functions of classifier scores (margins ``<w, x>``): CC is the paper's estimator; ACC,
PCC and PACC are the standard post-corrections [EXT], fed with statistics of the *same*
scorer on held-out labelled data (``Calibration``). Ties: a score of exactly 0 is negative
(§8 item 17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: prevalence estimators selectable at prediction time
METHODS = ("cc", "acc", "pcc", "pacc")

#: the default of ``quantify`` and ``window_prevalence``: PACC had the lowest mean error of
#: the four for ``scan`` and within 10% of the lowest for ``nemsis`` under QuaPy's
#: artificial-prevalence protocol (``benchmarks/README.md``, "Quantifiers under QuaPy's APP")
DEFAULT_METHOD = "pacc"

#: the paper's estimator (classify and count), still selectable as ``method="cc"``
PAPER_METHOD = "cc"

#: ACC/PACC fall back to the unadjusted estimate when the denominator is below this (§1.2)
MIN_DENOMINATOR = 0.05


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def cc(scores: Any) -> float:
    """Classify and count: the fraction of scores > 0 (§1.2)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("cannot estimate a prevalence from an empty batch")
    return float(np.mean(s > 0.0))


def acc(scores: Any, tpr: float, fpr: float) -> float:
    """Adjusted CC: clip((CC - FPR)/(TPR - FPR), 0, 1); CC when TPR - FPR < 0.05 (§1.2)."""
    return adjust(cc(scores), tpr, fpr)


def adjust(estimate: float, pos_rate: float, neg_rate: float) -> float:
    """The ACC/PACC correction ``clip((e - neg_rate)/(pos_rate - neg_rate), 0, 1)``."""
    den = pos_rate - neg_rate
    if not den >= MIN_DENOMINATOR:
        return float(estimate)
    return float(min(1.0, max(0.0, (estimate - neg_rate) / den)))


def pcc(scores: Any, a: float, b: float) -> float:
    """Probabilistic CC: mean of sigma(a s + b) with Platt parameters (a, b) (§1.2)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("cannot estimate a prevalence from an empty batch")
    return float(np.mean(_sigmoid(a * s + b)))


def pacc(scores: Any, a: float, b: float, mean_pos: float, mean_neg: float) -> float:
    """Probabilistic ACC: clip((PCC - E[sigma|-])/(E[sigma|+] - E[sigma|-]), 0, 1) (§1.2)."""
    return adjust(pcc(scores, a, b), mean_pos, mean_neg)


def platt_fit(scores: Any, labels: Any, *, max_iter: int = 100) -> tuple[float, float]:
    """Fit sigma(a s + b) to labels (+1/-1) by Newton's method on the log-loss.

    Uses Platt's (1999) smoothed targets ``(n_+ + 1)/(n_+ + 2)`` and ``1/(n_- + 2)`` so
    separable data give finite parameters. Deterministic; returns ``(a, b)``.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels) > 0
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("Platt calibration needs both classes")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    a, b = 0.0, math.log((n_pos + 1.0) / (n_neg + 1.0))
    prev = math.inf
    for _ in range(max_iter):
        q = _sigmoid(a * s + b)
        g = np.array([np.dot(q - t, s), np.sum(q - t)])
        wv = q * (1.0 - q)
        h = np.array([[np.dot(wv, s * s), np.dot(wv, s)], [np.dot(wv, s), np.sum(wv)]])
        h += 1e-12 * np.eye(2)
        step = np.linalg.solve(h, g)
        # backtracking keeps Newton monotone on (near-)separable data
        loss = _logloss(a, b, s, t)
        lr = 1.0
        while lr > 1e-8:
            na, nb = a - lr * step[0], b - lr * step[1]
            new = _logloss(na, nb, s, t)
            if new <= loss:
                break
            lr *= 0.5
        a, b = float(na), float(nb)
        if abs(prev - new) <= 1e-12 * max(1.0, abs(new)):
            break
        prev = new
    return a, b


def _logloss(a: float, b: float, s: np.ndarray, t: np.ndarray) -> float:
    z = a * s + b
    # log(1 + e^z) - t z, computed stably
    return float(np.sum(np.logaddexp(0.0, z) - t * z))


@dataclass(frozen=True)
class Calibration:
    """Statistics of one scorer on held-out labelled data, for ACC / PCC / PACC."""

    tpr: float
    fpr: float
    a: float
    b: float
    mean_pos: float
    mean_neg: float

    @classmethod
    def fit(cls, scores: Any, labels: Any) -> Calibration:
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(labels) > 0
        if not y.any() or y.all():
            raise ValueError("calibration needs both classes")
        a, b = platt_fit(s, y)
        prob = _sigmoid(a * s + b)
        return cls(
            tpr=float(np.mean(s[y] > 0.0)),
            fpr=float(np.mean(s[~y] > 0.0)),
            a=a,
            b=b,
            mean_pos=float(np.mean(prob[y])),
            mean_neg=float(np.mean(prob[~y])),
        )

    def estimate(self, scores: Any, method: str) -> float:
        """The prevalence estimate of ``method`` (one of ``METHODS``) for a batch of scores."""
        if method == "cc":
            return cc(scores)
        if method == "acc":
            return acc(scores, self.tpr, self.fpr)
        if method == "pcc":
            return pcc(scores, self.a, self.b)
        if method == "pacc":
            return pacc(scores, self.a, self.b, self.mean_pos, self.mean_neg)
        raise ValueError(f"unknown method={method!r}; valid ones are {list(METHODS)}")


def estimate(scores: Any, method: str, calibration: Calibration | None) -> float:
    """``method``'s estimate; without a calibration only CC is possible (others fall back)."""
    if method not in METHODS:
        raise ValueError(f"unknown method={method!r}; valid ones are {list(METHODS)}")
    if calibration is None:
        return cc(scores)
    return calibration.estimate(scores, method)
