"""APAS: adaptive passive-aggressive regression with side information, and PAS.

Shi, Ying, Palomar (NeurIPS 2024), implemented per ``docs/algorithms/apas.md``. One round:
the PA (or PA-II) step (2), the proximal step (5) with side information h_t over the feasible
set W (Algorithm 2 / exact proxes), then the threshold update (7) with the modified
derivative (8) computed by the chain rule (9)-(10) from the prox already at hand (§2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from learners._constraints import (
    AnyOf,
    Boolean,
    Constraint,
    Interval,
    NoneOr,
    Options,
    Predicate,
)
from learners._prox import FEASIBLE_SETS, projection
from learners._side import SIDES, ScaSettings, SideInfo
from learners.base import Learner, Prediction, StepReport, readonly
from learners.pa import pa_step_size

#: a weight counts as held above this size (spec §5.2, cardinality).
ACTIVE_THRESHOLD = 1e-6
_INF = math.inf


def _nonneg_list(v: Any) -> bool:
    return (
        isinstance(v, list | tuple)
        and len(v) > 0
        and all(
            not isinstance(r, bool) and isinstance(r, int | float) and 0.0 <= r < _INF for r in v
        )
    )


def _label_list(v: Any) -> bool:
    return (
        isinstance(v, list | tuple)
        and len(v) > 0
        and all(not isinstance(g, bool) and isinstance(g, int) and g >= 0 for g in v)
    )


@dataclass(frozen=True)
class _Step:
    """Everything one round computes, before any state is written."""

    y_hat: float
    a: float
    tau: float
    w_hat: np.ndarray
    w_new: np.ndarray
    iterations: int
    converged: bool
    side: SideInfo
    clipped: bool
    den: float
    nx: float


class APASRegressor(Learner):
    """Adaptive passive-aggressive regression with side information (APAS); PAS when
    ``adaptive=False``.

    The weight held in round t is ``w_t`` (the prediction is ``w_t . x_t``); after the
    label, ``w_{t+1} = prox_{lam (h_t + i_W)}(PA step)`` and the threshold epsilon adapts by
    projected subgradient steps on the Moreau-envelope loss f_t(epsilon) (eqs. (5)-(10)).
    For index tracking x_t are asset returns, y_t the index return, W the simplex and the
    default side information the negative log-return ``h_t(w) = -log(1 + x_t . w)``.

    Parameters
    ----------
    dim : int
        Number of assets / features (the paper's N).
    lam : float, default=1e-2
        Trade-off lambda of the prox (5), in (0, inf): small tracks, large pursues h_t.
    variant : {"pa", "pa1", "pa2"}, default="pa"
        PA step inside (2): PA, PA-I (spec §1.3, not used in the paper) or PA-II.
    C : float, default=25.0
        Aggressiveness of PA-I / PA-II, in (0, inf]; 1/(2C) is comparable to ||x||^2 of daily
        returns with N=100 (spec §2.1). Unused by plain PA.
    nu, D : float, default=1e-4, 5e-3
        The interval [nu, D] of the threshold (Assumption 1), 0 < nu < D.
    G : float, default=1.0
        Bound on |f_t'| (Assumption 2), in (0, inf); scales the step size eta_t.
    epsilon : float, default=5e-4
        Initial threshold epsilon_1 (in [nu, D] when adaptive); the fixed threshold of PAS.
    adaptive : bool, default=True
        Adapt epsilon by (7); ``False`` gives PAS (epsilon held fixed).
    side : {"log_return", "weighted_l1", "turnover", "group_lasso", "none"}, default="log_return"
        Side information h_t (§3.2): -log(1 + x_t.w); sum_i rho_i |w_i|; rho ||w - w_t||_1;
        sum_j rho_j ||w_{G_j}||_2; or a constant (PA with lazy projection).
    rho : float or list of float, optional
        Weights of h_t: per asset (weighted_l1, default 1), per group (group_lasso, default
        sqrt(|G_j|)) or one scalar (turnover, default 1); a scalar is broadcast. Only for
        these three sides.
    groups : list of int, optional
        Group label of each asset (group_lasso only); a per-group ``rho`` follows the sorted
        labels. Default: 10 contiguous, nearly equal groups (min(10, dim)), as in the paper's
        speed study.
    feasible : {"simplex", "l1_ball", "none"}, default="simplex"
        The feasible set W: the probability simplex (budget, long only), the l1 ball of
        ``radius``, or R^N.
    radius : float, default=1.0
        Radius of the l1 ball, in (0, inf).
    gamma1, sca_rho : float, default=1.0, 0.01
        SCA step sizes gamma^1 in (0, 1] and gamma^{k+1} = gamma^k (1 - sca_rho gamma^k),
        sca_rho in (0, 1) (Algorithm 2; keep sca_rho small, §7 item 14).
    tol : float, default=1e-10
        SCA stops when ||w~^{k+1} - w^k||_inf <= tol.
    max_iter : int, default=100
        Cap on SCA iterations per round.

    Attributes
    ----------
    w_ : ndarray of shape (dim,)
        Weight w_t held in the current round; starts at Pi_W(0) (1/N on the simplex).
    eps_ : float
        Current threshold epsilon_t.
    t_ : int
        Round counter t >= 1 (enters the step size eta_t, so it is persisted).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> N, T = 20, 200
    >>> w_star = rng.dirichlet(np.ones(N))
    >>> model = APASRegressor(N, lam=5e-2)
    >>> sq = 0.0
    >>> for t in range(T):
    ...     x = 5e-4 + 1e-2 * rng.normal(size=N)
    ...     y = float(x @ w_star + 1e-3 * rng.normal())
    ...     sq += model.learn(x, y).loss
    >>> print(f"RMSE {np.sqrt(sq / T):.4f}, budget {model.weights.sum():.6f}")
    RMSE 0.0017, budget 1.000000

    References
    ----------
    R. Shi, J. Ying, D. P. Palomar, "Adaptive Passive-Aggressive Framework for Online
    Regression with Side Information", NeurIPS 2024, eqs.
    (2)-(11), Algorithms 1-2, App. C; ``docs/algorithms/apas.md``.
    """

    kind: ClassVar[str] = "apas"
    preprocess_refused: ClassVar[dict[str, str]] = dict.fromkeys(
        ("standardize", "clip", "intercept"),
        "APAS weights are portfolio weights on raw returns (x_t . w is the portfolio's return)",
    )
    _constraints: ClassVar[dict[str, Constraint]] = {
        "lam": Interval(0.0, _INF, closed="neither"),
        "variant": Options(("pa", "pa1", "pa2")),
        "C": Interval(0.0, _INF, closed="right"),
        "nu": Interval(0.0, _INF, closed="neither"),
        "D": Interval(0.0, _INF, closed="neither"),
        "G": Interval(0.0, _INF, closed="neither"),
        "epsilon": Interval(0.0, _INF, closed="left"),
        "adaptive": Boolean(),
        "side": Options(SIDES),
        "rho": NoneOr(
            AnyOf(
                Interval(0.0, _INF, closed="left"),
                Predicate(
                    _nonneg_list,
                    "a non-empty list of finite numbers >= 0",
                    {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 1},
                ),
            )
        ),
        "groups": NoneOr(
            Predicate(
                _label_list,
                "a list of integer group labels >= 0",
                {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
            )
        ),
        "feasible": Options(FEASIBLE_SETS),
        "radius": Interval(0.0, _INF, closed="neither"),
        "gamma1": Interval(0.0, 1.0, closed="right"),
        "sca_rho": Interval(0.0, 1.0, closed="neither"),
        "tol": Interval(0.0, _INF, closed="left"),
        "max_iter": Interval(1, 100_000, integer=True),
    }

    lam: float
    variant: str
    C: float
    nu: float
    D: float
    G: float
    epsilon: float
    adaptive: bool
    side: str
    rho: float | list[float] | None
    groups: list[int] | None
    feasible: str
    radius: float
    gamma1: float
    sca_rho: float
    tol: float
    max_iter: int

    def __init__(
        self,
        dim: int,
        *,
        lam: float = 1e-2,
        variant: str = "pa",
        C: float = 25.0,
        nu: float = 1e-4,
        D: float = 5e-3,
        G: float = 1.0,
        epsilon: float = 5e-4,
        adaptive: bool = True,
        side: str = "log_return",
        rho: float | list[float] | None = None,
        groups: list[int] | None = None,
        feasible: str = "simplex",
        radius: float = 1.0,
        gamma1: float = 1.0,
        sca_rho: float = 0.01,
        tol: float = 1e-10,
        max_iter: int = 100,
    ):
        self._init_from(locals())
        self._check_cross_fields()
        self._groups, self._rho = self._side_weights()
        self._sca = ScaSettings(float(gamma1), float(sca_rho), float(tol), int(max_iter))
        self._proj = projection(feasible, float(radius))
        self.w_ = self._proj(np.zeros(self.dim))  # w_1 = Pi_W(0) (§2.1; App. D takes w^_1 = 0)
        self.eps_ = float(epsilon)
        self.t_ = 1

    # ---- validation of the parameters that depend on each other -----------------------------
    def _fail(self, name: str, must: str, value: Any) -> None:
        raise ValueError(f"{self.kind}: parameter {name!r} must be {must}, got {value!r}")

    def _check_cross_fields(self) -> None:
        if not self.nu < self.D:
            self._fail("D", f"greater than nu={self.nu}", self.D)
        if self.adaptive and not self.nu <= self.epsilon <= self.D:
            self._fail("epsilon", f"in [nu, D] = [{self.nu}, {self.D}] when adaptive", self.epsilon)
        if self.rho is not None and self.side not in ("weighted_l1", "turnover", "group_lasso"):
            self._fail("rho", "None unless side is weighted_l1, turnover or group_lasso", self.rho)
        if self.side == "turnover" and isinstance(self.rho, list | tuple):
            self._fail("rho", "a single number for side='turnover'", self.rho)
        if self.groups is not None:
            if self.side != "group_lasso":
                self._fail("groups", "None unless side='group_lasso'", self.groups)
            if len(self.groups) != self.dim:
                self._fail("groups", f"a list of {self.dim} labels (one per asset)", self.groups)

    def _side_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Group labels 0..m-1 per asset and the weight vector rho of h_t."""
        if self.side == "group_lasso":
            if self.groups is None:
                parts = np.array_split(np.arange(self.dim), min(10, self.dim))
                labels = np.concatenate([np.full(p.size, j) for j, p in enumerate(parts)])
            else:
                _, labels = np.unique(np.asarray(self.groups), return_inverse=True)
            labels = labels.astype(np.intp)
            sizes = np.bincount(labels)
            rho = self._broadcast_rho(np.sqrt(sizes.astype(float)), sizes.size, "groups")
            return labels, rho
        labels = np.zeros(self.dim, dtype=np.intp)
        if self.side == "weighted_l1":
            return labels, self._broadcast_rho(np.ones(self.dim), self.dim, "assets")
        if self.side == "turnover":
            scale = 1.0 if self.rho is None else self.rho  # a scalar: checked in __init__
            return labels, np.asarray([scale], dtype=np.float64).ravel()
        return labels, np.zeros(1)

    def _broadcast_rho(self, default: np.ndarray, n: int, what: str) -> np.ndarray:
        if self.rho is None:
            return default
        if isinstance(self.rho, list | tuple):
            if len(self.rho) != n:
                self._fail("rho", f"a number or a list of {n} weights (one per {what})", self.rho)
            return np.asarray(self.rho, dtype=np.float64)
        return np.full(n, float(self.rho))

    # ---- the algorithm ---------------------------------------------------------------------
    @property
    def weights(self) -> np.ndarray:
        """The current weight / portfolio w_t (read-only view)."""
        return readonly(self.w_)

    def side_info(self, x: np.ndarray) -> SideInfo:
        """h_t for instance ``x`` at the current state."""
        return SideInfo(self.side, x, self.w_, self._rho, self._groups)

    def _step(self, x: np.ndarray, y: float, eps: float, sca: ScaSettings) -> _Step:
        w = self.w_
        y_hat = float(w @ x)
        e = y_hat - y
        a = abs(e)
        nx = float(x @ x)
        den = nx + 1.0 / (2.0 * self.C) if self.variant == "pa2" else nx
        tau = pa_step_size(a, eps, nx, self.variant, self.C) if nx > 0.0 else 0.0
        # PA-I: where tau is clipped at C, w^ does not move with epsilon, so f_t' = 0.
        clipped = self.variant == "pa1" and nx > 0.0 and (a - eps) / nx > self.C
        # eq. (2): w^ = w + sign(y - w.x) tau x; passive (w^ = w) when a <= eps or x = 0
        w_hat = w - np.sign(e) * tau * x if tau > 0.0 else w.copy()
        side = self.side_info(x)
        res = side.prox(w_hat, self.lam, self.feasible, self.radius, sca)  # eq. (5)
        return _Step(
            y_hat, a, tau, w_hat, res.w, res.iterations, res.converged, side, clipped, den, nx
        )

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        eps = self.eps_
        st = self._step(x, y, eps, self._sca)
        g = eta = 0.0
        new_eps = eps
        if self.adaptive and st.nx > 0.0:
            s = math.copysign(1.0, st.y_hat - y) if st.a > 0.0 else 0.0
            zeta = min(max(st.a, self.nu), self.D)  # zeta_t = Pi_D(|w.x - y|)
            # (9)+(10): f_t'(eps) = s (w^ - w+).x / (lam den)  (§2.3)
            d = 0.0 if st.clipped else s * float((st.w_hat - st.w_new) @ x) / (self.lam * st.den)
            if eps < zeta:
                g = d  # (8), first branch
            elif st.a >= self.nu:
                g = max(0.0, d)  # (8): max{0, left derivative at zeta}; w^(zeta) = w^(eps)
            # else a < nu: f_t is flat on [nu, D], left derivative 0 (§7 item 5)
            eta = zeta * math.sqrt(self.D) / (self.G * math.sqrt(self.nu) * math.sqrt(self.t_))
            new_eps = min(max(eps - eta * g, self.nu), self.D)  # eq. (7)
        turnover = float(np.abs(st.w_new - self.w_).sum())
        guarded = st.side.log_guarded(st.w_new)
        self.w_ = st.w_new
        self.eps_ = new_eps
        self.t_ += 1
        return StepReport(
            prediction=st.y_hat,
            loss=(st.y_hat - y) ** 2,
            diagnostics={
                "epsilon": new_eps,
                "epsilon_used": eps,
                "eps_loss": max(0.0, st.a - eps),
                "tau": st.tau,
                "derivative": g,
                "step_size": eta,
                "prox_iterations": float(st.iterations),
                "prox_converged": float(st.converged),
                "turnover": turnover,
                "active_assets": float(np.count_nonzero(np.abs(st.w_new) > ACTIVE_THRESHOLD)),
                "log_guard": float(guarded),
            },
        )

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        return Prediction(float(self.w_ @ x))

    # ---- monitoring helpers (no state change) ------------------------------------------------
    def epsilon_loss(self, x: Any, y: Any, epsilon: float, *, tol: float | None = None) -> float:
        """f_t(epsilon) = M_{lam(h_t + i_W)}(w^_{t+1}(epsilon)) at the current state, eq. (6).

        Used for regret monitoring (§8) and tests; ``tol`` overrides the SCA tolerance.
        """
        xv, yv = self._check_x(x), self._check_y(y)
        sca = self._sca if tol is None else ScaSettings(self.gamma1, self.sca_rho, tol, 100_000)
        st = self._step(xv, yv, float(epsilon), sca)
        gap = st.w_new - st.w_hat
        return st.side.value(st.w_new) + float(gap @ gap) / (2.0 * self.lam)

    def portfolio_summary(self) -> dict[str, float]:
        """Gauges for a portfolio endpoint; the weights themselves are ``weights``."""
        w = self.w_
        return {
            "epsilon": self.eps_,
            "rounds": float(self.t_ - 1),
            "budget": float(w.sum()),
            "gross_exposure": float(np.abs(w).sum()),
            "active_assets": float(np.count_nonzero(np.abs(w) > ACTIVE_THRESHOLD)),
        }

    # ---- contract-test hooks ------------------------------------------------------------------
    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"variant": "pa2", "adaptive": False, "lam": 5e-2},
            {"variant": "pa1", "C": 1.0, "feasible": "l1_ball", "radius": 0.8},
            {"side": "weighted_l1", "rho": [0.1, 0.2, 0.0, 0.3, 0.1]},
            {"side": "turnover", "rho": 0.5, "feasible": "l1_ball"},
            {"side": "group_lasso", "groups": [0, 0, 1, 1, 2], "feasible": "simplex"},
            {"side": "none", "feasible": "none", "nu": 1e-3, "D": 1.0, "epsilon": 0.01},
        ]

    @classmethod
    def _test_stream(cls, dim: int, n: int, seed: int) -> tuple[np.ndarray, list[Any]]:
        """Daily-return-scale index tracking: y = x.w* + noise, w* on the simplex."""
        rng = np.random.default_rng(seed)
        X = 5e-4 + 1e-2 * rng.normal(size=(n, dim))
        w_star = rng.dirichlet(np.ones(dim))
        y = X @ w_star + 1e-3 * rng.normal(size=n)
        return X, [float(v) for v in y]
