"""Closed-form references of the transductive squared-loss forecasters (offline only).

Equations: ``docs/algorithms/transductive.md``.

Pure numpy functions for the tests and the reproduction (``benchmarks/transductive/run.py``);
no registered learner uses them, so the service never imports them:

* :func:`forward_predictions` runs a whole sequence through VAW / ridge with any PD
  regulariser Lambda (the transductive one, Lambda = lam * G_T, or the isotropic lam * I);
* :func:`o2b_predict` is the online-to-batch predictor of spec §8 for Algorithm A;
* :func:`transductive_regulariser`, :func:`hindsight_loss` and :func:`theorem1_bound`: the
  regulariser lam * G_T, the regret comparator and the Theorem 1 / Corollary 41 bound.

References
----------
Qian, Rakhlin, Zhivotovskiy, "Refined Risk Bounds for Unbounded Losses via Transductive
Priors" (arXiv 2410.21621); Gaillard, Gerchinovitz, Huard, Stoltz (2019), Thm. 7.
"""

from __future__ import annotations

import numpy as np


def forward_predictions(
    X: np.ndarray,
    y: np.ndarray,
    Lambda: np.ndarray,
    *,
    ridge: bool = False,
    clip: float | None = None,
    clip_labels: bool = False,
) -> np.ndarray:
    """Predictions of the forward (VAW) or ridge forecaster with regulariser ``Lambda``.

    VAW:   y_t = x_t^T (Lambda + G_t)^-1 b_{t-1}      (G_t includes x_t; spec §3.1)
    ridge: y_t = x_t^T (Lambda + G_{t-1})^-1 b_{t-1}  (spec §3.3, Cor. 40/41)

    ``clip=Y`` clips every output to [-Y, Y] and, with ``clip_labels``, the labels used in
    the updates too. ``Lambda`` must be positive definite (a reference implementation for
    tests and benchmarks: plain Sherman-Morrison, O(d^2) per round).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    M = np.linalg.inv(np.asarray(Lambda, dtype=np.float64))
    M = 0.5 * (M + M.T)
    b = np.zeros(X.shape[1])
    out = np.empty(X.shape[0])
    for t, (x, v) in enumerate(zip(X, y, strict=True)):
        Mx = M @ x
        s = float(x @ Mx)
        raw = float(Mx @ b)
        pred = raw if ridge else raw / (1.0 + s)  # x^T A_t^-1 b = x^T M b / (1 + x^T M x)
        if clip is not None:
            pred = min(clip, max(-clip, pred))
            if clip_labels:
                v = min(clip, max(-clip, v))
        out[t] = pred
        M -= np.outer(Mx, Mx) / (1.0 + s)  # Sherman-Morrison: A_t = A_{t-1} + x x^T
        b += v * x
    return out


def transductive_regulariser(X: np.ndarray, lam: float) -> np.ndarray:
    """lam * G_T for a full-rank design (spec eq. (6): prior N(0, (Y^2/lam) G_T^-1))."""
    X = np.asarray(X, dtype=np.float64)
    return lam * (X.T @ X)


def hindsight_loss(X: np.ndarray, y: np.ndarray) -> float:
    """inf_theta sum_t (y_t - theta.x_t)^2, by least squares (the regret comparator)."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    theta = np.linalg.lstsq(X, y, rcond=None)[0]
    return float(np.sum((y - X @ theta) ** 2))


def theorem1_bound(lam: float, sum_y2: float, d: int, Y: float, *, ridge: bool = False) -> float:
    """lam * sum y^2 + c d Y^2 log(1 + 1/lam), c = 1 (VAW, Thm. 1) or 4 (clipped ridge, Cor. 41)."""
    c = 4.0 if ridge else 1.0
    return lam * sum_y2 + c * d * Y * Y * float(np.log1p(1.0 / lam))


def o2b_predict(
    X_train: np.ndarray, y_train: np.ndarray, x: np.ndarray, lam: float | None = None
) -> float:
    """Online-to-batch predictor f(x) of spec §8 (Proposition 25) for Algorithm A.

    f(x) = (1/(n+1)) sum_{t=1}^{n+1} x^T (lam G + G_{t-1} + x x^T)^-1 b_{t-1}, with
    G = sum_i X_i X_i^T + x x^T and lam = d/(n+1) by default; O(n d^2) by rank-1 updates.
    Needs G invertible (full-rank design).
    """
    X_train = np.asarray(X_train, dtype=np.float64)
    y_train = np.asarray(y_train, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    n, d = X_train.shape
    if lam is None:
        lam = d / (n + 1)
    G = X_train.T @ X_train + np.outer(x, x)
    # M = (lam G + G_{t-1})^-1 for t = 1, then rank-1 updates with the training rows.
    M = np.linalg.inv(lam * G)
    M = 0.5 * (M + M.T)
    b = np.zeros(d)
    total = 0.0
    for t in range(n + 1):
        Mx = M @ x
        total += float(Mx @ b) / (1.0 + float(x @ Mx))  # x^T (A + x x^T)^-1 b
        if t == n:
            break
        xi = X_train[t]
        Mxi = M @ xi
        M -= np.outer(Mxi, Mxi) / (1.0 + float(xi @ Mxi))
        b += y_train[t] * xi
    return total / (n + 1)
