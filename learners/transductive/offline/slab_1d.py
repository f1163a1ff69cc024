"""Transductive classification in one dimension, exactly (docs/algorithms/transductive.md).

Logistic loss: the transductive Gaussian Bayes mixture E_lam(S) (Definition 11, Prop. 15)
and Algorithm 1, the exponential-weights aggregate of all 2T + 1 slab-experts (Lemma 10,
Definition 12, Theorem 13). Hinge loss: the same experts with the hinge posterior and the
clipped posterior mean (eqs. 29-30), aggregated by Algorithm 2 (Lemma 19, Theorem 21).

Everything is computed by quadrature on a fixed symmetric grid (§6.4 "Exact in d <= 2";
the grid +-10^linspace(-5, 7, 6001)/rms(x) and {0}), vectorised over the experts. The
slab methods are exponential in d (§13.7) and sized for offline / low-QPS use; this module
covers d = 1, where the spec gives an exact, practical implementation. The functions take
whole sequences (the design x is known in advance: that is the transductive setting).
Offline only: the tests and the reproduction (``benchmarks/transductive/run.py``) use it, no
registered learner does, so the service never imports it.
"""

from __future__ import annotations

import math

import numpy as np

from learners.transductive.logistic import log_sigmoid


def e3_stream(T: int, case: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The spec's E3 stream: x = 1e-3 z with z standard normal; ``"sep"`` labels sign(z)
    (+1 at 0), ``"logit5"`` labels +1 with probability sigmoid(5 z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=T)
    if case == "logit5":
        u = rng.random(T)
        return 1e-3 * z, np.where(u < 1 / (1 + np.exp(-5 * z)), 1.0, -1.0)
    return 1e-3 * z, np.where(z >= 0, 1.0, -1.0)


def quadrature_grid(
    scale: float, n: int = 6001, lo: float = -5.0, hi: float = 7.0
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric grid +-scale*10^linspace(lo, hi, n) and {0}, with log trapezoid weights."""
    pos = scale * 10.0 ** np.linspace(lo, hi, n)
    theta = np.concatenate([-pos[::-1], [0.0], pos])
    gaps = np.diff(theta)
    w = np.zeros_like(theta)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return theta, np.log(w)


def rms(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(np.mean(x * x)))


def _predictive(lp: np.ndarray, theta: np.ndarray, xt: float) -> np.ndarray:
    """log E_P sigma(+theta x_t), log E_P sigma(-theta x_t) for grid posteriors ``lp`` (E, N):
    one exp pass, both labels as sums of positives."""
    S = np.exp(lp - np.max(lp, axis=-1, keepdims=True))
    z = theta * xt
    num = S @ np.stack([_sigmoid(z), _sigmoid(-z)], axis=1)
    return np.log(num) - np.log(S.sum(axis=-1))[..., None]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(log_sigmoid(z))


def _row_lse(A: np.ndarray) -> np.ndarray:
    m = np.max(A, axis=-1, keepdims=True)
    return (m + np.log(np.sum(np.exp(A - m), axis=-1, keepdims=True)))[..., 0]


def bayes_mixture_1d(
    x: np.ndarray, y: np.ndarray, theta: np.ndarray, log_prior: np.ndarray
) -> np.ndarray:
    """Sequential log-probabilities log p_t(+1), log p_t(-1) of the Bayes mixture (eq. 18)
    with the prior given on a grid (``log_prior`` includes the quadrature weights).

    Returns an array of shape (T, 2). p_t(y) = E_{P_t} sigma(y theta x_t), computed for both
    labels as sums of positives (accurate log-loss even when one label is unlikely).
    """
    lp = np.asarray(log_prior, dtype=np.float64).copy()
    out = np.empty((len(x), 2))
    for t, (xt, yt) in enumerate(zip(x, y, strict=True)):
        out[t] = _predictive(lp, theta, xt)
        lp += log_sigmoid(yt * theta * xt)
    return out


def tg_logistic_1d(x: np.ndarray, y: np.ndarray, lam: float | None = None) -> np.ndarray:
    """The transductive Gaussian Bayes mixture with S = X (spec §6.5 ``tlogistic-gauss``):
    prior exp(-(lam/2) theta^2 G_X) [Rc], default lam = 1/T. Returns (T, 2) log-probs."""
    x = np.asarray(x, dtype=np.float64)
    lam = 1.0 / len(x) if lam is None else lam
    theta, logw = quadrature_grid(1.0 / rms(x))
    return bayes_mixture_1d(x, y, theta, logw - 0.5 * lam * theta**2 * float(x @ x))


def slab_experts_1d(x: np.ndarray) -> np.ndarray:
    """One theta per distinct partition of X by the slab |theta x| <= 1 (Lemma 14, d = 1).

    Breakpoints are +-1/|x_t|; each expert is the midpoint of two consecutive sorted
    breakpoints, and the two extreme experts use twice the extreme breakpoint (spec E3).
    2T + 1 experts when the |x_t| are distinct and nonzero.
    """
    ax = np.abs(np.asarray(x, dtype=np.float64))
    ax = ax[ax > 0]
    br = np.unique(np.concatenate([-1.0 / ax, 1.0 / ax]))
    if br.size == 0:
        return np.zeros(1)
    return np.concatenate([[2 * br[0]], (br[:-1] + br[1:]) / 2, [2 * br[-1]]])


class _Slabs:
    """Per-expert grid posteriors: log-densities (E, N) of theta given the in-slab history."""

    def __init__(
        self, x: np.ndarray, experts: np.ndarray, lam: float, theta: np.ndarray, logw: np.ndarray
    ) -> None:
        self.inside = np.abs(experts[:, None] * x[None, :]) <= 1.0  # (E, T)
        G_S = (self.inside * (x * x)[None, :]).sum(axis=1)  # G_S of each slab
        # prior pi_S ∝ exp(-(lam/2) theta^2 G_S) (Definition 11)
        self.lp = logw[None, :] - 0.5 * lam * G_S[:, None] * theta[None, :] ** 2


def slab_logistic_1d(
    x: np.ndarray,
    y: np.ndarray,
    lam: float | None = None,
    experts: np.ndarray | None = None,
    return_experts: bool = False,
) -> tuple[np.ndarray, ...]:
    """Algorithm 1 (spec §6.3) in d = 1 with exact experts and quadrature.

    Default lam = d/(T^3 ln^2 2); outside its slab an expert predicts sign(theta x_t) with
    probability 1 - 1/T; uniform prior over experts; EW with eta = 1 (Bayes).
    Returns (log p_t(+1), log p_t(-1)) of the aggregate, shape (T, 2), and every expert's
    cumulative log loss, shape (E,); with ``return_experts`` also every expert's
    (log p(+1), log p(-1)) per round, shape (T, E, 2).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    T = len(x)
    lam = 1.0 / (T**3 * math.log(2) ** 2) if lam is None else lam
    experts = slab_experts_1d(x) if experts is None else np.asarray(experts, dtype=np.float64)
    theta, logw = quadrature_grid(1.0 / rms(x))
    slabs = _Slabs(x, experts, lam, theta, logw)
    E = len(experts)
    expert_loss = np.zeros(E)
    out = np.empty((T, 2))
    per_expert = np.empty((T, E, 2)) if return_experts else None
    lo, hi = math.log(1.0 / T), math.log1p(-1.0 / T)
    for t in range(T):
        xt, yt = x[t], y[t]
        inside = slabs.inside[:, t]
        lpe = np.empty((E, 2))
        # outside the slab: +1 with probability 1 - 1/T when theta x_t > 0
        pos = experts * xt > 0
        lpe[:, 0] = np.where(pos, hi, lo)
        lpe[:, 1] = np.where(pos, lo, hi)
        if inside.any():
            lpe[inside] = _predictive(slabs.lp[inside], theta, xt)
            slabs.lp[inside] += log_sigmoid(yt * theta * xt)[None, :]
        # the aggregate: p(y) = sum_e w_e p_e(y), w_e ∝ exp(-loss_e) / |E|
        logwe = -expert_loss - _row_lse(-expert_loss[None, :])[0]
        out[t] = _row_lse((logwe[:, None] + lpe).T)
        expert_loss -= lpe[:, 0] if yt > 0 else lpe[:, 1]
        if per_expert is not None:
            per_expert[t] = lpe
    if per_expert is not None:
        return out, expert_loss, per_expert
    return out, expert_loss


def hinge(z: np.ndarray | float, y: np.ndarray | float, gamma: float) -> np.ndarray:
    """Normalised hinge at margin gamma: max(0, 1 - y z / gamma)."""
    return np.maximum(0.0, 1.0 - np.asarray(y) * np.asarray(z) / gamma)


def slab_hinge_1d(
    x: np.ndarray,
    y: np.ndarray,
    gamma: float,
    *,
    lam: float | None = None,
    eta: float = 0.5,
    experts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 (spec §7.2) in d = 1: hinge slab-experts aggregated by EW.

    In its slab an expert predicts the clipped posterior mean E_P clip_gamma(theta x_t)
    (eq. 30) under the prior N(0, (lam G_S)^-1) and the tempered hinge likelihood
    exp(-eta sum hinge); outside it predicts gamma sign(theta x_t). Defaults: lam =
    d/(gamma^2 T^3), eta = 1/2 for both layers (Theorem 21). The grid is scaled by gamma
    because the comparator's margins are O(gamma T) (Lemma 19).
    Returns the predictions (T,), each in [-gamma, gamma], and the experts' cumulative hinge.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    T = len(x)
    lam = 1.0 / (gamma**2 * T**3) if lam is None else lam
    experts = slab_experts_1d(x) if experts is None else np.asarray(experts, dtype=np.float64)
    theta, logw = quadrature_grid(gamma / rms(x))
    slabs = _Slabs(x, experts, lam, theta, logw)
    E = len(experts)
    expert_loss = np.zeros(E)
    out = np.empty(T)
    for t in range(T):
        xt, yt = x[t], y[t]
        inside = slabs.inside[:, t]
        f = gamma * np.sign(experts * xt)
        if inside.any():
            lp = slabs.lp[inside]
            post = np.exp(lp - np.max(lp, axis=1, keepdims=True))
            clipped = np.clip(theta * xt, -gamma, gamma)
            f[inside] = (post @ clipped) / post.sum(axis=1)
            slabs.lp[inside] -= eta * hinge(theta * xt, yt, gamma)[None, :]
        w = np.exp(-eta * (expert_loss - expert_loss.min()))
        out[t] = float(w @ f) / float(w.sum())
        expert_loss += hinge(f, yt, gamma)
    return out, expert_loss
