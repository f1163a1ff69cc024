"""Meta-ensemble that learns the discount of discounted VAW (Jacobsen & Cutkosky 2024, §4).

Experts: a geometric grid of discounts (§4.1) plus the gamma = 0 expert; range clipping
(Alg. 2, §4.2); adaptive fixed share in the log domain (Alg. 3, §4.3). All matrix experts
share x_t and are updated as one stacked computation (``learners.dvaw`` kernel).

References
----------
A. Jacobsen, A. Cutkosky (2024), ICML, arXiv 2405.19175, §4 and App. D-E;
``docs/algorithms/dvaw.md``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np

from learners import _accel
from learners._constraints import Constraint, Interval, Options
from learners.base import Prediction, StateSize, StepReport, positive
from learners.dvaw import (
    DEFAULT_REFRESH,
    STABILISER_CONSTRAINTS,
    Begin,
    StackLearner,
    begin_of,
    clip,
    fresh_stack,
    hinted,
    resolve_floor,
    set_stack_attrs,
    stabilise,
    step_compiled,
)

#: default horizon T_cap (spec §4.1 [eng]: a fixed cap instead of the doubling trick)
DEFAULT_HORIZON = 1_000_000


def expert_grid(dim: int, horizon: int, base: float = 2.0) -> list[float]:
    """Positive grid eta_i = min(2d b^i, d T), i >= 0, built by iteration (spec §4.1).

    Returns the effective memories eta (gamma = eta / (1 + eta)); the gamma = 0 expert is not
    included. Exact integer arithmetic when ``base`` is integral, so no log round-off.
    """
    eta_max: float = dim * horizon
    step: float = int(base) if float(base).is_integer() else float(base)
    eta: float = 2 * dim
    out: list[float] = []
    while eta < eta_max:
        out.append(eta)
        eta = eta * step
    out.append(eta_max)
    return [float(e) for e in out]


#: a grid longer than this is counted, not built (it is far over any memory budget)
_GRID_BUILD_LIMIT = 10_000


def grid_size(dim: int, horizon: int, base: float = 2.0) -> int:
    """``len(expert_grid(dim, horizon, base))``, without building a grid with a base so
    close to 1 that it would take minutes: above ``_GRID_BUILD_LIMIT`` the count
    ceil(log_b(horizon / 2)) + 2, one more than the grid (round-off), is returned."""
    if horizon <= 2:
        return 1
    count = math.ceil(math.log(horizon / 2) / math.log(base)) + 2
    return count if count > _GRID_BUILD_LIMIT else len(expert_grid(dim, horizon, base))


def log_normalise(logp: np.ndarray) -> np.ndarray:
    m = np.max(logp)
    return logp - (m + math.log(float(np.sum(np.exp(logp - m)))))


def share_rate(t: int) -> float:
    """beta_{t+1} = 1 / ((e + t) ln^2(e + t) + 1) (Alg. 3, natural log)."""
    a = math.e + t
    return 1.0 / (a * math.log(a) ** 2 + 1.0)


def fixed_share_step(
    logp: np.ndarray, ell: np.ndarray, L: float, t: int, log_p1: np.ndarray | float
) -> tuple[np.ndarray, float]:
    """One round of Alg. 3 in the log domain (spec §4.3): returns (log p_{t+1}, L_t).

    ``ell`` are the clipped losses of round t, ``L`` the running max before it and
    ``log_p1`` the log prior the share mixes back to.
    """
    L = max(L, float(np.max(ell)))
    if L > 0.0:  # alpha_t = 1 / (2 L_t); L_t = 0 leaves p unchanged
        logp = log_normalise(logp - ell / (2.0 * L))
    beta = share_rate(t)
    return np.logaddexp(math.log1p(-beta) + logp, math.log(beta) + log_p1), L


#: the hyperparameters the two discount-grid ensembles (``dvaw-ensemble``, ``dvaw-sa``) share
GRID_CONSTRAINTS: dict[str, Constraint] = {
    "lam": positive(),
    "base": Interval(1.0, 1e6, closed="right"),
    "horizon": Interval(1, 2**62, integer=True),
    "hint": Options(("self", "external")),
    "ref": Options(("last", "zero")),
}


class GridEnsemble(StackLearner):
    """What ``dvaw-ensemble`` and ``dvaw-sa`` share: discounted-VAW experts on the discount
    grid of :func:`expert_grid` (spec §4.1), a reference y^Ref_t and the hinted, clipped
    expert predictions (§4.2)."""

    lam: float
    base: float
    horizon: int
    hint: str
    ref: str
    stabilised: bool
    refresh: int
    lambda_floor: float | None
    M_: float
    y_prev_: float

    def _grid(self) -> np.ndarray:
        """The positive effective memories eta of the grid (``__init__``'s params set); also
        sets the regulariser floor of the stabilised mode."""
        self._floor = resolve_floor(float(self.lam), self.stabilised, self.lambda_floor)
        return np.array(expert_grid(self.dim, int(self.horizon), float(self.base)))

    def _reference(self, hint: float | None) -> float:
        if hint is not None:
            return hint
        return self.y_prev_ if self.ref == "last" else 0.0

    def _clipped_experts(
        self, x: np.ndarray, hint: float | None, b: Begin | None = None
    ) -> tuple[Begin, float, float, float, np.ndarray]:
        """(b, y^Ref_t, B_t = [lo, hi], the experts' hinted predictions): in self mode the
        fixed point Clip_B(mu_i) (§3.6), in external mode y~ = y^Ref (Thm 4.2)."""
        y_ref = self._reference(hint)
        lo, hi = y_ref - self.M_, y_ref + self.M_
        if b is None:
            b = self._begin(x)
        h = clip(b.mu, lo, hi) if self.hint == "self" else y_ref
        return b, y_ref, lo, hi, hinted(b, h)


class Forecast(NamedTuple):
    b: Begin
    y_ref: float
    raw: np.ndarray  # (N,) raw expert predictions, index 0 is the gamma = 0 expert
    clipped: np.ndarray  # (N,) clipped to B_t
    p: np.ndarray  # (N,) meta weights
    value: float


class DVAWEnsemble(GridEnsemble):
    """Discounted-VAW meta-ensemble: learns the discount factor online, no tuning (§4.4).

    Parameters
    ----------
    dim : int
        Number of features (standardise them and add an intercept; there is no bias).
    lam : float, default=1.0
        Regulariser lambda > 0 shared by all experts.
    base : float, default=2.0
        Grid ratio b > 1 (§4.1).
    horizon : int, default=1_000_000
        T (or T_cap) of the grid: eta runs from 2d to d * horizon. Beyond it the learner keeps
        working; the longest memory is then d * horizon rounds.
    hint : {"self", "external"}, default="self"
        Self-confident clipped hints (Thm 4.3; the best mode in §7.4) or external hints
        y~_t = y^Ref_t (Thm 4.2).
    ref : {"last", "zero"}, default="zero"
        Reference y^Ref_t: the previous label (y_0 = 0) or 0. An event ``hint``, when given,
        is used as y^Ref_t instead (any value known before y_t is allowed, §4.2). "zero" is
        the default because spec §7.4 found self/zero best in every scenario; "last" helps
        series with a large offset (AirlinePassengers, benchmarks/README.md).
    stabilised : bool, default=True
        Numerical safeguards of §3.7 (guard, periodic refresh, regulariser floor).
    refresh : int, default=64
        Refresh period K.
    lambda_floor : float or None, default=None
        Regulariser floor at refreshes; None means 1e-6 * lam (0 in exact mode).

    Attributes
    ----------
    P_, v_, Sigma_, theta_ : ndarray of shape (G, dim, dim) / (G, dim)
        Stacked states of the G = N - 1 matrix experts (§3.5).
    ridge_, logdet_ : ndarray of shape (G,)
        Ridge level and ln det Sigma per expert.
    logp_ : ndarray of shape (N,)
        Log meta weights; index 0 is the gamma = 0 expert (predicts y^Ref_t).
    L_, M_ : float
        Running max clipped loss (alpha_t = 1 / (2 L_t)) and running max |y_t - y^Ref_t|.
    y_prev_ : float
        Last label.
    loss_, expert_loss_ : float, ndarray of shape (N,)
        Cumulative squared error of the meta and of each expert's raw prediction.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = DVAWEnsemble(2, horizon=1000)
    >>> drift = linear_stream([1.0, -1.0], 1000, noise=0.1, then=(500, [-1.0, 2.0]))
    >>> rep = learn_stream(model, drift)
    >>> print(round(model.predict([1.0, 1.0]).value, 1))
    1.0
    >>> print(rep.diagnostics["effective_memory"] < 1000)
    True

    References
    ----------
    Jacobsen & Cutkosky (2024), Algs. 1-3, Thms 4.1-4.3; ``docs/algorithms/dvaw.md``.
    """

    kind: ClassVar[str] = "dvaw-ensemble"
    _constraints: ClassVar[dict[str, Constraint]] = {
        **GRID_CONSTRAINTS,
        **STABILISER_CONSTRAINTS,
    }
    max_dim: ClassVar[int] = 2_000  # G stacked d x d matrices

    def __init__(
        self,
        dim: int,
        *,
        lam: float = 1.0,
        base: float = 2.0,
        horizon: int = DEFAULT_HORIZON,
        hint: str = "self",
        ref: str = "zero",
        stabilised: bool = True,
        refresh: int = DEFAULT_REFRESH,
        lambda_floor: float | None = None,
    ):
        self._init_from(locals())
        eta = self._grid()
        self._eta = np.concatenate([[0.0], eta])  # eta of the gamma = 0 expert is 0
        self._gamma = eta / (1.0 + eta)
        self._log_gamma = -np.log1p(1.0 / eta)  # ln gamma without cancellation (§3.7 item 5)
        n = eta.size + 1
        set_stack_attrs(self, fresh_stack(eta.size, self.dim, float(lam)))
        self.logp_ = np.full(n, -math.log(n))  # p_1 uniform (Thm 4.1)
        self.L_ = 0.0
        self.M_ = 0.0
        self.y_prev_ = 0.0
        self.loss_ = 0.0
        self.expert_loss_ = np.zeros(n)
        self.refreshes_ = 0
        self.floor_lifts_ = 0
        self.t_ = 0

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        # the stack of G matrix experts, plus logp_ and expert_loss_ over the G + 1 experts
        G = grid_size(d, int(p["horizon"]), float(p["base"]))
        return StateSize.of(
            (16, "G*d^2", G * d * d),
            (16, "G*d", G * d),
            (32, "G", G),
            (16, "", 1),
            where=f"G = {G} discounts",
        )

    @property
    def gammas(self) -> np.ndarray:
        """The N discount factors, gamma = 0 first."""
        return np.concatenate([[0.0], self._gamma])

    @property
    def weights(self) -> np.ndarray:
        """The meta-weighted RLS estimates sum_i p_i v_i (the gamma = 0 expert counts as 0)."""
        p = np.exp(self.logp_)
        return np.asarray(p[1:] @ self.v_)

    def _forecast(self, x: np.ndarray, hint: float | None, b: Begin | None = None) -> Forecast:
        b, y_ref, lo, hi, experts = self._clipped_experts(x, hint, b)
        raw = np.concatenate([[y_ref], experts])
        clipped = clip(raw, lo, hi)
        p = np.exp(self.logp_)
        p /= p.sum()
        return Forecast(b, y_ref, raw, clipped, p, float(p @ clipped))

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        return Prediction(self._forecast(x, hint).value)

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        new = None
        if k is not None:
            # the experts' begin and commit in one compiled pass over each P (the commit
            # does not depend on the hint or the meta-weights, spec §4.2)
            new, sc = step_compiled(k, self, x, float(y))
            f = self._forecast(x, hint, begin_of(sc))
        else:
            f = self._forecast(x, hint)
        self.t_ += 1
        ell = 0.5 * (y - f.clipped) ** 2  # clipped losses go to the meta (Alg. 2)
        n = self.logp_.size
        self.logp_, self.L_ = fixed_share_step(self.logp_, ell, self.L_, self.t_, -math.log(n))
        self.M_ = max(self.M_, abs(y - f.y_ref))
        self.y_prev_ = float(y)
        # experts learn from the raw loss, independent of hints (§4.2, §9 item 13)
        s = self._commit(f.b, x, y) if new is None else new
        if self.stabilised:
            due = np.full(self._gamma.size, self.t_ % self.refresh == 0)
            s, n_ref, lifted = stabilise(s, f.b, due, self._floor)
            self.refreshes_ += n_ref
            self.floor_lifts_ += lifted
        set_stack_attrs(self, s)
        err = f.value - y
        self.loss_ += err * err
        self.expert_loss_ = self.expert_loss_ + (f.raw - y) ** 2
        return StepReport(prediction=f.value, loss=err * err, diagnostics=self._diagnostics())

    def _diagnostics(self) -> dict[str, float]:
        p = np.exp(self.logp_)
        out = {f"weight_{i}": float(w) for i, w in enumerate(p)}
        out.update({f"gamma_{i}": float(g) for i, g in enumerate(self.gammas)})
        out["effective_memory"] = float(p @ (1.0 + self._eta))  # sum_i p_i (1 + eta_i), §7.3
        out["entropy"] = float(-np.sum(p * self.logp_))
        out["range_M"] = self.M_
        out["max_loss_L"] = self.L_
        out["regret_vs_best_expert"] = float(self.loss_ - self.expert_loss_.min())
        out["refreshes"] = float(self.refreshes_)
        return out

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"horizon": 1000},
            {"horizon": 300, "hint": "external", "ref": "zero", "stabilised": False},
            {"horizon": 50, "base": 3.0, "refresh": 5, "lambda_floor": 0.5},
        ]
