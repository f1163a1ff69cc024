"""NEMSIS: online optimisation of nested concave quantification measures (Algorithm 1).

References
----------
Kar, Narasimhan, Li, Chawla, Sebastiani (2016), "Online Optimization Methods for the
Quantification Problem", KDD, Algorithm 1 and Table 1; ``docs/algorithms/nemsis.md``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from learners._constraints import Boolean, Constraint, Interval, NoneOr, Options
from learners.quantification import nested
from learners.quantification._quantifier import _Quantifier

#: the default measure, chosen by measurement (see ``measure`` below)
DEFAULT_MEASURE = "q"

#: the paper's measure (Kar et al. 2016, §6), still selectable as ``measure="negkld"``
PAPER_MEASURE = "negkld"


class NEMSIS(_Quantifier):
    """NEMSIS (NEsted priMal-dual StochastIc updateS) for NegKLD, Q_beta and BAKLD.

    A linear scorer ``w`` (plus a constant feature) is trained by projected stochastic
    gradient ascent on the class-normalised hinge reward, weighted by the chain-rule factor
    of the nested measure ``Psi(zeta1(P, N), zeta2(P, N))``; the dual variables are the
    gradients of ``zeta1``, ``zeta2`` and ``Psi`` at the running averages (closed forms,
    spec §1.4). The served model is the averaged iterate. ``predict`` gives the class
    (-1/+1) and its margin; ``quantify(X, method)`` the positive prevalence of a batch
    (PACC by default).
    ``learn(x, None)`` records an unlabelled vector in the prevalence window.

    Parameters
    ----------
    dim : int
        Number of features (a constant feature is appended when ``fit_intercept``).
    measure : {"negkld", "q", "bakld"}, default="q"
        The nested concave measure to maximise (Table 1). ``"q"`` (Q_beta, a hybrid of
        balanced accuracy and NSS) had the lowest prevalence error under QuaPy's
        artificial-prevalence protocol (``benchmarks/README.md``); pure NegKLD is
        maximised by near-random scorers with the right predicted fraction, so its CC
        estimate stays near the training prior when the prevalence shifts. The paper's
        configuration is ``measure="negkld"`` with ``quantify(X, method="cc")``.
    ns : bool, default=True
        NEMSIS-NS: the dual statistics use 0-1 rewards (true TPR/TNR counts) while the
        primal gradient uses the hinge surrogate; the paper found it better (§2.3).
    eta0 : float, default=1.0
        Base step size; ``eta_t = eta0 / sqrt(t)``.
    radius : float, default=10.0
        Radius R_W of the L2 ball the weights are projected onto.
    C : float, default=0.5
        BAKLD weight ("CWeight") in [0, 1]: ``C BA + (1 - C)(-KLD)``.
    beta : float, default=1.0
        beta of Q_beta (> 1 weights quantification more).
    reward : {"hinge", "logistic"}, default="hinge"
        Concave surrogate reward: ``min{1, y s}`` or ``1 - ln(1 + exp(-y s))``.
    prior : float or None, default=None
        Class prior p in (0, 1) used in the rewards and in KLD; None estimates it online as
        ``(n_pos + 1)/(n_labelled + 2)`` (§3.3). Use the training prevalence offline.
    eps : float or None, default=None
        Training smoothing of KLD; None uses ``1/(2 window)`` (§2.7). Offline: ``1/(2T)``.
    kappa : {"max", "paper_table"}, default="max"
        NSS normaliser ``1/max{p, n}`` (the paper's definition) or 1 (its tables), §8.3.
    window : int, default=1000
        Size of the unlabelled prevalence window and of the calibration window of
        labelled (prequential) scores used by ACC / PCC / PACC.
    fit_intercept : bool, default=True
        Append a constant 1 feature (inside the projection; §8 item 7).
    average : bool, default=True
        Serve the averaged iterate (the paper's output) or the last one.
    half_life : float or None, default=None
        Forgetting mode for drifting streams (spec §3.4 [EXT]): the running sums behind
        r_bar, q_bar, w_bar and the running prior decay by 2^(-1/half_life) per labelled
        event, and the step size stops shrinking at ``eta0 / sqrt(half_life)``. None
        (default) reproduces the paper's 1/t averages exactly.

    Attributes
    ----------
    w_, w_sum_ : ndarray of shape (dim + fit_intercept,)
        Current iterate and the sum of iterates (w_bar = w_sum_ / t_).
    t_ : int
        Labelled steps taken.
    sum_r_, sum_q_ : ndarray of shape (2,)
        Running sums of the reward statistics s and of the linearised inner values pi.
    rho_, z_, dual_alpha_, dual_beta_, dual_gamma_ : ndarray of shape (2,)
        Linearisation point, zeta(rho) and the dual variables alpha, beta, gamma.
    n_pos_, n_neg_ : int
        Labelled events per class.
    pos_weight_, neg_weight_, weight_ : float
        (Discounted) class counts behind the running prior and the sum of the averaging
        weights (equal to the counts and to ``t_`` unless ``half_life`` is set).
    cal_scores_, cal_labels_, unl_scores_ : ndarray of shape (window,)
        Ring buffers of prequential labelled scores and of unlabelled scores.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> u = np.array([1.0, 0.0, 0.0])
    >>> model = NEMSIS(3, measure="bakld", C=0.5, prior=0.2, eps=1e-4)
    >>> for _ in range(5000):
    ...     y = 1 if rng.random() < 0.2 else -1
    ...     _ = model.learn(rng.normal(size=3) + 0.75 * y * u, y)
    >>> ys = np.where(rng.random(20000) < 0.2, 1, -1)
    >>> X = rng.normal(size=(20000, 3)) + 0.75 * ys[:, None] * u
    >>> round(abs(model.quantify(X, method="cc") - 0.2), 1)
    0.0
    >>> model.predict(X[0]).value in (-1, 1)
    True

    References
    ----------
    Kar et al. (2016), KDD, Algorithm 1; ``docs/algorithms/nemsis.md``.
    """

    kind: ClassVar[str] = "nemsis"
    _constraints: ClassVar[dict[str, Constraint]] = {
        **_Quantifier._common_constraints,
        "measure": Options(("negkld", "q", "bakld")),
        "C": Interval(0.0, 1.0),
        "beta": Interval(0.0, math.inf, closed="neither"),
        "average": Boolean(),
        "half_life": NoneOr(Interval(1.0, math.inf)),
    }

    measure: str
    C: float
    beta: float
    average: bool
    half_life: float | None

    def __init__(
        self,
        dim: int,
        *,
        measure: str = DEFAULT_MEASURE,
        ns: bool = True,
        eta0: float = 1.0,
        radius: float = 10.0,
        C: float = 0.5,
        beta: float = 1.0,
        reward: str = "hinge",
        prior: float | None = None,
        eps: float | None = None,
        kappa: str = "max",
        window: int = 1000,
        fit_intercept: bool = True,
        average: bool = True,
        half_life: float | None = None,
    ):
        self._init_params(
            dim,
            {
                "measure": measure,
                "ns": ns,
                "eta0": eta0,
                "radius": radius,
                "C": C,
                "beta": beta,
                "reward": reward,
                "prior": prior,
                "eps": eps,
                "kappa": kappa,
                "window": window,
                "fit_intercept": fit_intercept,
                "average": average,
                "half_life": half_life,
            },
        )
        self._init_common_state()

    def _inner_codes(self) -> tuple[str, str]:
        c1, c2, _ = nested.NESTED_MEASURES[self.measure]
        return c1, c2

    def _gamma(self, q1: float, q2: float, p: float, eps: float) -> tuple[float, float]:
        if self.measure == "q":
            # §2.3 step 8: floor q_bar at 1e-6 so grad Psi_Q stays finite
            return nested.psi_q_grad(max(q1, 1e-6), max(q2, 1e-6), self.beta)
        return nested.linear_weights(self.measure, p, eps, self.C)

    def _gamma_code(self) -> tuple[int, float]:
        # learners/_kernels.py PSI_Q, LIN_NEGKLD, LIN_BAKLD
        if self.measure == "q":
            return 0, float(self.beta)
        return (1, 0.0) if self.measure == "negkld" else (2, float(self.C))

    def _decay(self) -> float:
        return 1.0 if self.half_life is None else 0.5 ** (1.0 / self.half_life)

    def _half_life(self) -> float:
        return math.inf if self.half_life is None else float(self.half_life)

    def _served(self) -> np.ndarray:
        return self._nemsis_average() if self.average else self.w_

    def _update(self, xb: np.ndarray, y: int) -> dict[str, float]:
        return self._nemsis_step(xb, y)

    @property
    def duals(self) -> dict[str, tuple[float, float]]:
        """Current rho, alpha, beta, gamma (for monitoring, §3.2)."""
        return {
            "rho": (float(self.rho_[0]), float(self.rho_[1])),
            "alpha": (float(self.dual_alpha_[0]), float(self.dual_alpha_[1])),
            "beta": (float(self.dual_beta_[0]), float(self.dual_beta_[1])),
            "gamma": (float(self.dual_gamma_[0]), float(self.dual_gamma_[1])),
        }

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"measure": "negkld"},  # the paper's configuration
            {"measure": "q", "beta": 2.0, "window": 16},
            {"measure": "bakld", "C": 0.25, "prior": 0.3, "eps": 0.01},
            {"measure": "negkld", "ns": False, "reward": "logistic", "average": False},
            {"measure": "bakld", "half_life": 20.0, "window": 10},
        ]
