"""Quantification measures of ``docs/algorithms/nemsis.md``, as pure numpy functions.

Three forms per measure (§7.1.3 checks that they agree):

* **prevalence form** (KLD only): ``kld(p, p_hat, n_samples)``, binary prevalences of the
  positive class, smoothed with ``eps = 1/(2 n_samples)`` as in the paper (``n_samples=None``
  gives the unsmoothed KLD);
* **count form**: ``ba(tp, fp, fn, tn)`` etc., from one sample's confusion counts;
* **rate form**: ``ba_rates(P, N)``, ``nss_rates(P, N, p)`` etc., from TPR ``P``, TNR ``N``
  and the positive fraction ``p`` (the "(P, N, p)" column of the table).

Directions: KLD, BER, CQB lower is better; everything else higher is better. Inputs may be
scalars or broadcastable arrays; outputs are floats or arrays accordingly.

References
----------
Kar, Narasimhan, Li, Chawla, Sebastiani (2016), "Online Optimization Methods for the
Quantification Problem", KDD, §3.1 and Tables 1-2; ``docs/algorithms/nemsis.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ArrayLike = Any

#: ``kappa`` options of NSS (spec §8 item 3): "max" is kappa = 1/max{p, n} (the paper's
#: definition in §3.1), "paper_table" is kappa = 1 (Tables 1-2 drop the normaliser).
KAPPA_MODES = ("max", "paper_table")


def _out(v: Any) -> Any:
    arr = np.asarray(v, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr


def smoothing_eps(n_samples: float | None) -> float:
    """The paper's smoothing constant ``eps = 1/(2 |S|)`` (0 when ``n_samples`` is None)."""
    if n_samples is None:
        return 0.0
    if n_samples <= 0:
        raise ValueError(f"n_samples must be positive, got {n_samples!r}")
    return 1.0 / (2.0 * float(n_samples))


def smooth(p: ArrayLike, eps: float) -> Any:
    """Binary additive smoothing ``p_s = (p + eps)/(1 + 2 eps)`` (§1.3, #C = 2)."""
    return _out((np.asarray(p, dtype=np.float64) + eps) / (1.0 + 2.0 * eps))


def _xlogy_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a log(a/b)`` with the convention 0 log 0 = 0 (unsmoothed KLD only)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a > 0, a * np.log(a / b), 0.0)
    return out


def kld(p: ArrayLike, p_hat: ArrayLike, n_samples: float | None = None) -> Any:
    """Binary KLD(p || p_hat) = sum_c p(c) log(p(c)/p_hat(c)) (paper eq. (1)).

    Both distributions are smoothed with ``eps = 1/(2 n_samples)`` first (§1.3, "KLD uses
    the smoothed p and p_hat in all places"); ``n_samples=None`` gives the raw KLD, which
    is ``inf`` when ``p_hat`` puts zero mass on a class that ``p`` does not.
    """
    eps = smoothing_eps(n_samples)
    ps = np.asarray(smooth(p, eps))
    qs = np.asarray(smooth(p_hat, eps))
    return _out(_xlogy_ratio(ps, qs) + _xlogy_ratio(1.0 - ps, 1.0 - qs))


def negkld(p: ArrayLike, p_hat: ArrayLike, n_samples: float | None = None) -> Any:
    """NegKLD = -KLD (higher is better)."""
    return _out(-np.asarray(kld(p, p_hat, n_samples)))


# ---- count form --------------------------------------------------------------------------
def _counts(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike) -> tuple[np.ndarray, ...]:
    arrs = tuple(np.asarray(v, dtype=np.float64) for v in (tp, fp, fn, tn))
    if any(np.any(a < 0) for a in arrs):
        raise ValueError("confusion counts must be non-negative")
    return arrs


def rates_from_counts(
    tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike
) -> tuple[Any, Any, Any, Any]:
    """``(P, N, p, |S|)``: TPR, TNR, positive fraction and sample size of a confusion matrix.

    A rate whose class is empty is taken as 1 (nothing to get wrong).
    """
    tp_, fp_, fn_, tn_ = _counts(tp, fp, fn, tn)
    pos, neg = tp_ + fn_, tn_ + fp_
    size = pos + neg
    with np.errstate(divide="ignore", invalid="ignore"):
        P = np.where(pos > 0, tp_ / np.where(pos > 0, pos, 1.0), 1.0)
        N = np.where(neg > 0, tn_ / np.where(neg > 0, neg, 1.0), 1.0)
        p = np.where(size > 0, pos / np.where(size > 0, size, 1.0), 0.0)
    return _out(P), _out(N), _out(p), _out(size)


def ba(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike) -> Any:
    """Balanced accuracy (TPR + TNR)/2."""
    P, N, _, _ = rates_from_counts(tp, fp, fn, tn)
    return ba_rates(P, N)


def ber(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike) -> Any:
    """Balanced error rate 1 - BA [EXT]."""
    return _out(1.0 - np.asarray(ba(tp, fp, fn, tn)))


def min_tpr_tnr(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike) -> Any:
    """min{TPR, TNR} [EXT]."""
    P, N, _, _ = rates_from_counts(tp, fp, fn, tn)
    return min_tpr_tnr_rates(P, N)


def kld_counts(
    tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike, *, smoothed: bool = True
) -> Any:
    """KLD between the sample's prevalence and the CC estimate (TP+FP)/|S| (§1.3)."""
    tp_, fp_, fn_, tn_ = _counts(tp, fp, fn, tn)
    size = tp_ + fp_ + fn_ + tn_
    return kld((tp_ + fn_) / size, (tp_ + fp_) / size, size if smoothed else None)


def nss(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike, *, kappa: str = "max") -> Any:
    """Normalised squared score 1 - ((FN - FP) / (max{p, n} |S|))^2 (§3.1 of the paper)."""
    tp_, fp_, fn_, tn_ = _counts(tp, fp, fn, tn)
    size = tp_ + fp_ + fn_ + tn_
    p = (tp_ + fn_) / size
    k = _kappa(p, kappa)
    return _out(1.0 - (k * (fn_ - fp_) / size) ** 2)


def cqb(tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike) -> Any:
    """CQB = |FP^2 - FN^2| (Milli et al.), an evaluation-only measure (lower is better)."""
    _, fp_, fn_, _ = _counts(tp, fp, fn, tn)
    return _out(np.abs(fp_**2 - fn_**2))


def q_beta(
    tp: ArrayLike,
    fp: ArrayLike,
    fn: ArrayLike,
    tn: ArrayLike,
    *,
    beta: float = 1.0,
    kappa: str = "max",
) -> Any:
    """Q_beta = (1+beta^2) BA NSS / (beta^2 BA + NSS) (Table 1)."""
    return q_beta_combine(ba(tp, fp, fn, tn), nss(tp, fp, fn, tn, kappa=kappa), beta)


def bakld(
    tp: ArrayLike,
    fp: ArrayLike,
    fn: ArrayLike,
    tn: ArrayLike,
    *,
    C: float = 0.5,
    smoothed: bool = True,
) -> Any:
    """BAKLD = C BA + (1 - C)(-KLD) (Table 1; C is the paper's "CWeight")."""
    b = np.asarray(ba(tp, fp, fn, tn))
    k = np.asarray(kld_counts(tp, fp, fn, tn, smoothed=smoothed))
    return _out(C * b - (1.0 - C) * k)


def cqreward(
    tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike, *, kappa: str = "max"
) -> Any:
    """CQReward = BA / (2 - NSS) (Table 2)."""
    return _out(
        np.asarray(ba(tp, fp, fn, tn)) / (2.0 - np.asarray(nss(tp, fp, fn, tn, kappa=kappa)))
    )


def bkreward(
    tp: ArrayLike, fp: ArrayLike, fn: ArrayLike, tn: ArrayLike, *, smoothed: bool = True
) -> Any:
    """BKReward = BA / (1 + KLD) (Table 2)."""
    b = np.asarray(ba(tp, fp, fn, tn))
    return _out(b / (1.0 + np.asarray(kld_counts(tp, fp, fn, tn, smoothed=smoothed))))


def q_beta_combine(pc: ArrayLike, pq: ArrayLike, beta: float = 1.0) -> Any:
    """The Q_beta combination of a classification score ``pc`` and a quantification score
    ``pq``: ``(1+beta^2) pc pq / (beta^2 pc + pq)`` (0 when both are 0)."""
    pc_, pq_ = np.asarray(pc, dtype=np.float64), np.asarray(pq, dtype=np.float64)
    b2 = beta * beta
    den = b2 * pc_ + pq_
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, (1.0 + b2) * pc_ * pq_ / np.where(den > 0, den, 1.0), 0.0)
    return _out(out)


# ---- rate form (P = TPR, N = TNR, p = positive fraction) ---------------------------------
def _kappa(p: ArrayLike, mode: str) -> Any:
    if mode == "max":
        p_ = np.asarray(p, dtype=np.float64)
        return 1.0 / np.maximum(p_, 1.0 - p_)
    if mode == "paper_table":
        return 1.0
    raise ValueError(f"unknown kappa mode {mode!r}; valid ones are {KAPPA_MODES}")


def cc_prevalence_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike) -> Any:
    """The CC estimate of a classifier with rates (P, N): ``pP + n(1 - N)`` (§0)."""
    P_, N_, p_ = (np.asarray(v, dtype=np.float64) for v in (P, N, p))
    return _out(p_ * P_ + (1.0 - p_) * (1.0 - N_))


def ba_rates(P: ArrayLike, N: ArrayLike) -> Any:
    return _out((np.asarray(P, dtype=np.float64) + np.asarray(N, dtype=np.float64)) / 2.0)


def ber_rates(P: ArrayLike, N: ArrayLike) -> Any:
    return _out(1.0 - np.asarray(ba_rates(P, N)))


def min_tpr_tnr_rates(P: ArrayLike, N: ArrayLike) -> Any:
    return _out(np.minimum(np.asarray(P, dtype=np.float64), np.asarray(N, dtype=np.float64)))


def kld_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, eps: float = 0.0) -> Any:
    """KLD_eps between p and the CC estimate ``pP + n(1-N)``, smoothed with ``eps``."""
    p_ = np.asarray(p, dtype=np.float64)
    ps = np.asarray(smooth(p_, eps))
    qs = np.asarray(smooth(cc_prevalence_rates(P, N, p_), eps))
    return _out(_xlogy_ratio(ps, qs) + _xlogy_ratio(1.0 - ps, 1.0 - qs))


def nss_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, kappa: str = "max") -> Any:
    """NSS = 1 - kappa^2 (p(1-P) - n(1-N))^2 (Table 1 with kappa, §1.3)."""
    P_, N_, p_ = (np.asarray(v, dtype=np.float64) for v in (P, N, p))
    d = p_ * (1.0 - P_) - (1.0 - p_) * (1.0 - N_)
    return _out(1.0 - (np.asarray(_kappa(p_, kappa)) * d) ** 2)


def cqb_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, n_samples: ArrayLike) -> Any:
    """CQB = |S|^2 |(n(1-N))^2 - (p(1-P))^2|."""
    P_, N_, p_ = (np.asarray(v, dtype=np.float64) for v in (P, N, p))
    s = np.asarray(n_samples, dtype=np.float64)
    return _out(s**2 * np.abs(((1.0 - p_) * (1.0 - N_)) ** 2 - (p_ * (1.0 - P_)) ** 2))


def q_beta_rates(
    P: ArrayLike, N: ArrayLike, p: ArrayLike, beta: float = 1.0, kappa: str = "max"
) -> Any:
    return q_beta_combine(ba_rates(P, N), nss_rates(P, N, p, kappa), beta)


def bakld_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, C: float = 0.5, eps: float = 0.0) -> Any:
    return _out(C * np.asarray(ba_rates(P, N)) - (1.0 - C) * np.asarray(kld_rates(P, N, p, eps)))


def cqreward_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, kappa: str = "max") -> Any:
    return _out(np.asarray(ba_rates(P, N)) / (2.0 - np.asarray(nss_rates(P, N, p, kappa))))


def bkreward_rates(P: ArrayLike, N: ArrayLike, p: ArrayLike, eps: float = 0.0) -> Any:
    return _out(np.asarray(ba_rates(P, N)) / (1.0 + np.asarray(kld_rates(P, N, p, eps))))


# ---- from labels and predictions ---------------------------------------------------------
def confusion_counts(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[int, int, int, int]:
    """``(tp, fp, fn, tn)`` for labels in {-1, +1} (or {0, 1}, booleans): positive = +1/1/True."""
    t = np.asarray(y_true) > 0
    q = np.asarray(y_pred) > 0
    if t.shape != q.shape:
        raise ValueError("y_true and y_pred must have the same shape")
    return (
        int(np.sum(t & q)),
        int(np.sum(~t & q)),
        int(np.sum(t & ~q)),
        int(np.sum(~t & ~q)),
    )


def all_measures(
    tp: float,
    fp: float,
    fn: float,
    tn: float,
    *,
    C: float = 0.5,
    beta: float = 1.0,
    kappa: str = "max",
) -> dict[str, float]:
    """Every §1.3 measure of one confusion matrix (KLD smoothed with eps = 1/(2|S|))."""
    size = tp + fp + fn + tn
    return {
        "prevalence": (tp + fn) / size,
        "cc": (tp + fp) / size,
        "kld": float(kld_counts(tp, fp, fn, tn)),
        "nss": float(nss(tp, fp, fn, tn, kappa=kappa)),
        "ba": float(ba(tp, fp, fn, tn)),
        "ber": float(ber(tp, fp, fn, tn)),
        "cqb": float(cqb(tp, fp, fn, tn)),
        "q_beta": float(q_beta(tp, fp, fn, tn, beta=beta, kappa=kappa)),
        "bakld": float(bakld(tp, fp, fn, tn, C=C)),
        "cqreward": float(cqreward(tp, fp, fn, tn, kappa=kappa)),
        "bkreward": float(bkreward(tp, fp, fn, tn)),
        "min_tpr_tnr": float(min_tpr_tnr(tp, fp, fn, tn)),
    }
