"""Strongly-adaptive discounted-VAW ensemble (Jacobsen & Cutkosky 2024, §5, Thm F.1).

One discounted-VAW expert per (discount, geometric covering interval), combined by the
adaptive fixed share of Alg. 3, with the exact lazy bookkeeping of spec §5.3: inactive
experts all predict y^Ref_t, so never-started experts are one pool (count + common weight)
and expired ones one bucket (count + total mass). Optionally (§5.5, default on) the
full-history experts of the §4 ensemble are added with half of the prior mass.

The active map is stored as stacked arrays: at any round exactly one interval per level k
is active, so expert row ``k * G + j`` is level k with the j-th positive discount, and
``start_[k]`` is the first round of that level's current interval (0 = none). With
``augment`` a last block of G rows holds the full-history experts.

References
----------
A. Jacobsen, A. Cutkosky (2024), §5 and App. F; Daniely, Gonen, Shalev-Shwartz (2015),
Strongly adaptive online learning; ``docs/algorithms/dvaw.md``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np

from learners._constraints import Boolean, Constraint
from learners.base import Prediction, StateSize, StepReport
from learners.dvaw import (
    DEFAULT_REFRESH,
    STABILISER_CONSTRAINTS,
    Begin,
    clip,
    fresh_stack,
    set_stack_attrs,
    stabilise,
    stack_attrs,
)
from learners.dvaw_ensemble import (
    DEFAULT_HORIZON,
    GRID_CONSTRAINTS,
    GridEnsemble,
    grid_size,
    share_rate,
)

NEG_INF = -math.inf


def _log(n: float) -> float:
    return math.log(n) if n > 0 else NEG_INF


def covering_size(horizon: int) -> int:
    """|S ∩ [1, T]| = sum_{k: 2^k <= T} floor(T / 2^k) (spec §5.1, Daniely's i >= 1)."""
    return sum(horizon >> k for k in range(horizon.bit_length()))


def _logsumexp(a: np.ndarray) -> float:
    m = float(np.max(a))
    if m == NEG_INF:
        return NEG_INF
    return m + math.log(float(np.sum(np.exp(a - m))))


class Forecast(NamedTuple):
    b: Begin
    y_ref: float
    active: np.ndarray  # bool (R,) rows that predict with their own state
    clipped: np.ndarray  # (R,) clipped predictions of the matrix rows
    ref_mass: float  # pool + expired mass, all predicting y^Ref_t
    value: float


class DVAWStronglyAdaptive(GridEnsemble):
    """Strongly-adaptive discounted-VAW ensemble over geometric covering intervals (§5).

    Parameters
    ----------
    dim : int
        Number of features.
    lam : float, default=1.0
        Regulariser lambda > 0 of every expert.
    base : float, default=2.0
        Discount-grid ratio b > 1 (§4.1).
    horizon : int, default=1_000_000
        T (T_cap) of the discount grid and of the covering intervals. After it no interval
        expert starts again; the full-history experts (``augment``) keep learning.
    hint : {"self", "external"}, default="self"
        Self-confident clipped hints or y~ = y^Ref (as in ``dvaw-ensemble``).
    ref : {"last", "zero"}, default="zero"
        y^Ref_t = y_{t-1} or 0; an event ``hint`` overrides it.
    augment : bool, default=True
        Add the full-history experts with prior 1/2 (the SA-plus of §5.5); False is the
        faithful Thm F.1 ensemble with a uniform prior.
    stabilised : bool, default=True
        Safeguards of §3.7.
    refresh : int, default=64
        Refresh period K (per expert, counted from its start).
    lambda_floor : float or None, default=None
        Regulariser floor; None means 1e-6 * lam when stabilised.

    Attributes
    ----------
    P_, v_, Sigma_, theta_, ridge_, logdet_ : ndarray
        Stacked states of the R = (levels + augment) * G matrix rows.
    logw_ : ndarray of shape (R,)
        Log weights of the rows (-inf for an inactive interval level).
    start_ : ndarray of shape (levels,)
        First round of each level's active interval (0 = none).
    log_pi_, n_pool_ : float, int
        Common log weight and count of never-started experts (the gamma = 0 ones stay here).
    log_E_, n_exp_ : float, int
        Total log mass and count of expired experts.
    L_, M_, y_prev_ : float
        Running max clipped loss, running max |y - y^Ref| and the last label.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = DVAWStronglyAdaptive(2, horizon=1024)
    >>> drift = linear_stream([1.0, -1.0], 600, noise=0.1, then=(300, [-1.0, 2.0]))
    >>> rep = learn_stream(model, drift)
    >>> print(round(model.predict([1.0, 1.0]).value, 1))
    1.0
    >>> print(round(rep.diagnostics["total_mass"], 9))
    1.0

    References
    ----------
    Jacobsen & Cutkosky (2024), Thm F.1; ``docs/algorithms/dvaw.md``.
    """

    kind: ClassVar[str] = "dvaw-sa"
    augment: bool
    _constraints: ClassVar[dict[str, Constraint]] = {
        **GRID_CONSTRAINTS,
        "augment": Boolean(),
        **STABILISER_CONSTRAINTS,
    }
    max_dim: ClassVar[int] = 500

    def __init__(
        self,
        dim: int,
        *,
        lam: float = 1.0,
        base: float = 2.0,
        horizon: int = DEFAULT_HORIZON,
        hint: str = "self",
        ref: str = "zero",
        augment: bool = True,
        stabilised: bool = True,
        refresh: int = DEFAULT_REFRESH,
        lambda_floor: float | None = None,
    ):
        self._init_from(locals())
        eta = self._grid()
        self._eta = eta
        self._G = eta.size
        self._levels = int(horizon).bit_length()  # levels k with 2^k <= T
        blocks = self._levels + (1 if augment else 0)
        self._rows = blocks * self._G
        gamma = eta / (1.0 + eta)
        self._gamma = np.tile(gamma, blocks)
        self._log_gamma = np.tile(-np.log1p(1.0 / eta), blocks)
        # prior p_1 (§5.2; §5.5 puts 1/2 on the G full-history experts)
        n_int = (self._G + 1) * covering_size(int(horizon))
        share = 0.5 if augment else 1.0
        self._logp1_int = math.log(share / n_int)
        self._logp1 = np.full(self._rows, self._logp1_int)
        if augment:
            self._logp1[self._levels * self._G :] = math.log(0.5 / self._G)
        set_stack_attrs(self, fresh_stack(self._rows, self.dim, float(lam)))
        self.logw_ = np.full(self._rows, NEG_INF)
        if augment:
            self.logw_[self._levels * self._G :] = self._logp1[self._levels * self._G :]
        self.start_ = np.zeros(self._levels, dtype=np.int64)
        self.log_pi_ = self._logp1_int
        self.n_pool_ = n_int
        self.log_E_ = NEG_INF
        self.n_exp_ = 0
        self.L_ = 0.0
        self.M_ = 0.0
        self.y_prev_ = 0.0
        self.refreshes_ = 0
        self.t_ = 0
        self._start_intervals(1)

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        # R = (L + augment) * G stacked experts with a log weight each, start_ per level
        G = grid_size(d, int(p["horizon"]), float(p["base"]))
        L = int(p["horizon"]).bit_length()
        R = (L + int(p["augment"])) * G
        rows = "(L + 1)*G" if p["augment"] else "L*G"
        return StateSize.of(
            (16, "R*d^2", R * d * d),
            (16, "R*d", R * d),
            (24, "R", R),
            (8, "L", L),
            where=f"R = {rows} = {R} expert rows, L = {L} levels, G = {G} discounts",
        )

    # ---- lazy bookkeeping (§5.3) ---------------------------------------------------------
    def _level_rows(self, k: int) -> slice:
        return slice(k * self._G, (k + 1) * self._G)

    def _start_intervals(self, t: int) -> None:
        """Experts of intervals starting at round t take weight pi from the pool."""
        if t > self.horizon:
            return
        s = stack_attrs(self)
        fresh = fresh_stack(self._G, self.dim, float(self.lam))
        for k in range(self._levels):
            if t % (1 << k) != 0:
                break  # 2^k | t fails for every larger k too
            rows = self._level_rows(k)
            for arr, new in zip(s, fresh, strict=True):
                arr[rows] = new
            self.logw_[rows] = self.log_pi_
            self.n_pool_ -= self._G
            self.start_[k] = t

    def _expire_intervals(self, t: int) -> None:
        """Experts whose interval ends at round t move their mass into the expired bucket."""
        for k in range(self._levels):
            start = int(self.start_[k])
            if start == 0:
                continue
            if t == min(start + (1 << k) - 1, self.horizon):
                rows = self._level_rows(k)
                self.log_E_ = float(np.logaddexp(self.log_E_, _logsumexp(self.logw_[rows])))
                self.n_exp_ += self._G
                self.logw_[rows] = NEG_INF
                self.start_[k] = 0

    # ---- prediction and update -------------------------------------------------------------
    def _forecast(self, x: np.ndarray, hint: float | None) -> Forecast:
        b, y_ref, lo, hi, experts = self._clipped_experts(x, hint)
        clipped = clip(experts, lo, hi)
        active = np.isfinite(self.logw_)
        w = np.exp(self.logw_)  # exp(-inf) = 0 for inactive rows
        ref_mass = self.n_pool_ * math.exp(self.log_pi_) + math.exp(self.log_E_)
        value = float(w[active] @ clipped[active]) + ref_mass * y_ref  # §5.3 prediction
        return Forecast(b, y_ref, active, clipped, ref_mass, value)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        return Prediction(self._forecast(x, hint).value)

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        f = self._forecast(x, hint)
        self.t_ += 1
        t = self.t_
        ell = 0.5 * (y - f.clipped) ** 2
        ell_ref = 0.5 * (y - f.y_ref) ** 2
        act = f.active
        self.L_ = max(self.L_, ell_ref, float(ell[act].max()) if act.any() else 0.0)
        alpha = 1.0 / (2.0 * self.L_) if self.L_ > 0.0 else 0.0  # running max, incl. ell_ref
        a_rows = self.logw_[act] - alpha * ell[act]
        a_pool = _log(self.n_pool_) + self.log_pi_ - alpha * ell_ref
        a_exp = self.log_E_ - alpha * ell_ref
        log_z = _logsumexp(np.concatenate([a_rows, [a_pool, a_exp]]))
        beta = share_rate(t)
        keep, mix = math.log1p(-beta), math.log(beta)
        # p <- (1 - beta) p e^{-alpha l} / Z + beta p_1 (Alg. 3, lazily, §5.3)
        logw = np.full(self._rows, NEG_INF)
        logw[act] = np.logaddexp(keep + a_rows - log_z, mix + self._logp1[act])
        self.logw_ = logw
        self.log_pi_ = float(
            np.logaddexp(keep + self.log_pi_ - alpha * ell_ref - log_z, mix + self._logp1_int)
        )
        self.log_E_ = float(
            np.logaddexp(keep + a_exp - log_z, mix + _log(self.n_exp_) + self._logp1_int)
        )
        self.M_ = max(self.M_, abs(y - f.y_ref))
        self.y_prev_ = float(y)
        s = self._commit(f.b, x, y)
        if self.stabilised:
            s, n_ref, _ = stabilise(s, f.b, self._refresh_due(t), self._floor)
            self.refreshes_ += n_ref
        set_stack_attrs(self, s)
        self._expire_intervals(t)
        self._start_intervals(t + 1)
        err = f.value - y
        return StepReport(prediction=f.value, loss=err * err, diagnostics=self._diagnostics())

    def _refresh_due(self, t: int) -> np.ndarray:
        start = np.concatenate([self.start_, [1] if self.augment else []])
        age = np.where(start > 0, t - start + 1, 1)
        return np.repeat(age % self.refresh == 0, self._G)

    def _diagnostics(self) -> dict[str, float]:
        w = np.exp(self.logw_)
        per_gamma = w.reshape(-1, self._G).sum(axis=0)
        ref_mass = self.n_pool_ * math.exp(self.log_pi_) + math.exp(self.log_E_)
        out = {"weight_0": ref_mass, "gamma_0": 0.0}
        for j in range(self._G):
            out[f"weight_{j + 1}"] = float(per_gamma[j])
            out[f"gamma_{j + 1}"] = float(self._eta[j] / (1.0 + self._eta[j]))
        out["effective_memory"] = ref_mass + float(per_gamma @ (1.0 + self._eta))
        out["total_mass"] = ref_mass + float(w.sum())
        out["active_experts"] = float(np.isfinite(self.logw_[: self._levels * self._G]).sum())
        out["range_M"] = self.M_
        out["max_loss_L"] = self.L_
        return out

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {"horizon": 256},
            {"horizon": 64, "augment": False, "hint": "external", "ref": "zero"},
            {"horizon": 100, "stabilised": False, "base": 4.0},
        ]
