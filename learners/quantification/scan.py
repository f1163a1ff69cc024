"""CAN / SCAN: optimisation of pseudo-concave quantification measures (Algorithms 2-3).

``can_finite`` is CAN (Algorithm 2) over a finite candidate set with an exact argmax (the
setting of spec §7.5); ``SCAN`` is the streaming Algorithm 3 with the corrections of spec
§2.5 (the learning phase hands its NEMSIS output over; level sums are normalised to rates).

References
----------
Kar, Narasimhan, Li, Chawla, Sebastiani (2016), "Online Optimization Methods for the
Quantification Problem", KDD, Algorithms 2-3, Table 2; ``docs/algorithms/nemsis.md``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from learners._constraints import Constraint, Interval, Options
from learners.quantification import measures, nested
from learners.quantification._quantifier import _Quantifier

PSEUDO_CONCAVE = ("cqreward", "bkreward")


def class_and_quant(
    measure: str, P: Any, N: Any, p: float, *, kappa: str = "max", eps: float = 0.0
) -> tuple[Any, Any]:
    """``(P_class, P_quant)`` of a pseudo-concave measure at rates (P, N) (Table 2, §1.4)."""
    pc = measures.ba_rates(P, N)
    if measure == "cqreward":
        return pc, 2.0 - np.asarray(measures.nss_rates(P, N, p, kappa))
    if measure == "bkreward":
        return pc, 1.0 + np.asarray(measures.kld_rates(P, N, p, eps))
    raise ValueError(f"unknown pseudo-concave measure {measure!r}")


def can_finite(
    P: Any,
    N: Any,
    p: float,
    *,
    measure: str = "cqreward",
    kappa: str = "max",
    eps: float = 0.0,
    start: int = 0,
    tol: float = 0.0,
    k_max: int = 100,
) -> tuple[list[int], list[float]]:
    """CAN (Algorithm 2) over a finite set of candidate models given by their rates.

    Starts at candidate ``start`` with ``v0 = P(w0)``; each iteration takes the exact argmax
    of the valuation ``V(w, v) = P_class(w) - v P_quant(w)`` and sets ``v = P(w_new)``;
    stops when the level no longer rises by more than ``tol`` (do-while, §2.4) or after
    ``k_max`` iterations. Returns the visited candidate indices and their levels.
    """
    pc, pq = class_and_quant(measure, P, N, p, kappa=kappa, eps=eps)
    pc, pq = np.atleast_1d(pc), np.atleast_1d(pq)
    perf = pc / pq
    idx, levels = [int(start)], [float(perf[start])]
    for _ in range(k_max):
        v = levels[-1]
        k = int(np.argmax(pc - v * pq))  # step 4: exact concave-oracle stand-in
        v_new = float(perf[k])  # step 5: v = P(w)
        if v_new <= v + tol:
            break
        idx.append(k)
        levels.append(v_new)
    return idx, levels


class SCAN(_Quantifier):
    """SCAN (Stochastic Concave AlternatioN) for CQReward and BKReward.

    Epoch ``e`` first runs a fresh NEMSIS instance (warm-started at the current model,
    step sizes restarting at ``eta0``) for ``s_e`` labelled events on the valuation
    ``V(w, v) = BA + v zeta2 - const`` (``zeta2`` = NSS for CQReward, -KLD for BKReward),
    hands its averaged iterate over, then freezes it for ``s'_e`` events to estimate the
    level ``v = P_class / P_quant`` from per-class 0-1 rates (SCAN-NS) or clipped hinge
    rewards. Epoch lengths grow geometrically: ``s_e = s0 growth^e``,
    ``s'_e = max(level_min, level_ratio s_e)``. The served model is the last hand-over
    (the running NEMSIS average during the very first learning phase).

    Parameters
    ----------
    dim : int
        Number of features (a constant feature is appended when ``fit_intercept``).
    measure : {"cqreward", "bkreward"}, default="cqreward"
        The pseudo-concave measure (Table 2).
    ns : bool, default=True
        SCAN-NS: 0-1 level estimation and NEMSIS-NS inner runs (Figure 6's variant).
    eta0 : float, default=1.0
        Base step size of each inner NEMSIS run.
    radius : float, default=10.0
        Radius R_W of the weight ball.
    s0 : int, default=1000
        Length of the first learning phase.
    growth : float, default=2.0
        Geometric growth ratio of the epoch lengths (Theorem 6 uses (M/(M-m))^2).
    level_ratio : float, default=0.25
        Level phase length as a fraction of the learning phase.
    level_min : int, default=200
        Minimum level phase length.
    reward, prior, eps, kappa, window, fit_intercept
        As for ``nemsis``.

    Attributes
    ----------
    w_out_ : ndarray of shape (dim + fit_intercept,)
        The hand-over model of the last completed learning phase.
    epoch_, phase_, phase_count_ : int
        Current epoch, phase (0 learning, 1 level estimation) and events in the phase.
    level_ : float
        Current level v (starts at 0: epoch 0 maximises BA).
    lvl_pos_, lvl_neg_, lvl_hit_pos_, lvl_hit_neg_ : float
        Level-phase class counts and per-class reward sums.
    w_, w_sum_, t_, sum_r_, sum_q_, rho_, z_, dual_alpha_, dual_beta_, dual_gamma_
        The inner NEMSIS state (see ``nemsis``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> u = np.array([1.0, 0.0])
    >>> model = SCAN(2, s0=500, prior=0.2, eps=1e-4)
    >>> for _ in range(8000):
    ...     y = 1 if rng.random() < 0.2 else -1
    ...     _ = model.learn(rng.normal(size=2) + 0.75 * y * u, y)
    >>> model.epoch_ >= 3, 0.5 < model.level_ < 1.0
    (True, True)

    References
    ----------
    Kar et al. (2016), KDD, Algorithm 3; ``docs/algorithms/nemsis.md``.
    """

    kind: ClassVar[str] = "scan"
    _constraints: ClassVar[dict[str, Constraint]] = {
        **_Quantifier._common_constraints,
        "measure": Options(PSEUDO_CONCAVE),
        "s0": Interval(1, 10**9, integer=True),
        "growth": Interval(1.0, 16.0),
        "level_ratio": Interval(0.0, 16.0, closed="right"),
        "level_min": Interval(1, 10**9, integer=True),
    }

    _weight_vectors: ClassVar[int] = 3  # w_, w_sum_ and the hand-over w_out_

    measure: str
    s0: int
    growth: float
    level_ratio: float
    level_min: int
    w_out_: np.ndarray
    epoch_: int
    phase_: int
    phase_count_: int
    level_: float
    lvl_pos_: float
    lvl_neg_: float
    lvl_hit_pos_: float
    lvl_hit_neg_: float

    def __init__(
        self,
        dim: int,
        *,
        measure: str = "cqreward",
        ns: bool = True,
        eta0: float = 1.0,
        radius: float = 10.0,
        s0: int = 1000,
        growth: float = 2.0,
        level_ratio: float = 0.25,
        level_min: int = 200,
        reward: str = "hinge",
        prior: float | None = None,
        eps: float | None = None,
        kappa: str = "max",
        window: int = 1000,
        fit_intercept: bool = True,
    ):
        self._init_params(
            dim,
            {
                "measure": measure,
                "ns": ns,
                "eta0": eta0,
                "radius": radius,
                "s0": s0,
                "growth": growth,
                "level_ratio": level_ratio,
                "level_min": level_min,
                "reward": reward,
                "prior": prior,
                "eps": eps,
                "kappa": kappa,
                "window": window,
                "fit_intercept": fit_intercept,
            },
        )
        self.level_ = 0.0  # v0 = 0 (§2.5 iii), needed by _gamma during the first init
        self._init_common_state()
        self.w_out_ = np.zeros(self.n_features)
        self.epoch_ = 0
        self.phase_ = 0
        self.phase_count_ = 0
        self._reset_level_stats()

    # ---- epoch schedule ------------------------------------------------------------------
    def learn_length(self, epoch: int) -> int:
        """s_e = s0 growth^e (rounded)."""
        return max(1, int(round(self.s0 * self.growth**epoch)))

    def level_length(self, epoch: int) -> int:
        """s'_e = max(level_min, level_ratio s_e)."""
        return max(int(self.level_min), int(round(self.level_ratio * self.learn_length(epoch))))

    def _reset_level_stats(self) -> None:
        self.lvl_pos_ = 0.0
        self.lvl_neg_ = 0.0
        self.lvl_hit_pos_ = 0.0
        self.lvl_hit_neg_ = 0.0

    # ---- nested valuation V(., v) = BA + v zeta2 (§2.5) -----------------------------------
    def _inner_codes(self) -> tuple[str, str]:
        return nested.VALUATION_INNER[self.measure]

    def _gamma(self, q1: float, q2: float, p: float, eps: float) -> tuple[float, float]:
        return 1.0, float(self.level_)  # Psi_v(x, y) = x + v y is linear

    def _gamma_code(self) -> tuple[int, float]:
        return 3, float(self.level_)  # learners/_kernels.py LIN_LEVEL: (1, v)

    def _served(self) -> np.ndarray:
        if self.epoch_ == 0 and self.phase_ == 0:
            return self._nemsis_average()
        return self.w_out_

    def _update(self, xb: np.ndarray, y: int) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.phase_ == 0:
            out = self._nemsis_step(xb, y)
            self.phase_count_ += 1
            if self.phase_count_ >= self.learn_length(self.epoch_):
                # correction (i): hand the NEMSIS output over, then freeze it
                self.w_out_ = self._nemsis_average()
                self.phase_, self.phase_count_ = 1, 0
                self._reset_level_stats()
        else:
            m = y * float(self.w_out_ @ xb)
            hit = (1.0 if m > 0.0 else 0.0) if self.ns else min(1.0, m)
            if y > 0:
                self.lvl_pos_ += 1.0
                self.lvl_hit_pos_ += hit
            else:
                self.lvl_neg_ += 1.0
                self.lvl_hit_neg_ += hit
            self.phase_count_ += 1
            if self.phase_count_ >= self.level_length(self.epoch_):
                self._close_epoch()
        out.update({"epoch": float(self.epoch_), "phase": float(self.phase_), "level": self.level_})
        return out

    def _close_epoch(self) -> None:
        if self.lvl_pos_ > 0 and self.lvl_neg_ > 0:
            # correction (ii): per-class rates, clipped to [0, 1] in surrogate mode
            P = min(1.0, max(0.0, self.lvl_hit_pos_ / self.lvl_pos_))
            N = min(1.0, max(0.0, self.lvl_hit_neg_ / self.lvl_neg_))
            pc, pq = class_and_quant(
                self.measure, P, N, self._prior(), kappa=self.kappa, eps=self._eps()
            )
            self.level_ = float(pc) / float(pq)
        self.epoch_ += 1
        self.phase_, self.phase_count_ = 0, 0
        self._reset_level_stats()
        self._nemsis_init(self.w_out_)  # fresh NEMSIS run on V(., v), warm-started

    @property
    def level_estimate(self) -> float:
        """The current level v: SCAN's running estimate of the measure's value."""
        return float(self.level_)

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {"s0": 20, "level_min": 5},
            {"measure": "bkreward", "s0": 10, "growth": 1.5, "level_min": 3, "prior": 0.3},
            {"ns": False, "s0": 15, "level_ratio": 0.5, "level_min": 4, "window": 8},
        ]
