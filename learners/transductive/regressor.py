"""Exponential weights with a transductive prior, squared loss (docs/algorithms/transductive.md).

The design vectors of a block are registered before their labels (``register``); the prior
N(0, (Y^2/lam) G_T^-1) built from them makes the exponential-weights forecaster collapse to
VAW with the regulariser lam * G_T (spec §3.1), whose regret is at most
lam sum y^2 + d Y^2 log(1 + 1/lam), with no dependence on |x| or |theta| (Theorem 1).

References
----------
Qian, Rakhlin, Zhivotovskiy, "Refined Risk Bounds for Unbounded Losses via Transductive
Priors" (arXiv 2410.21621), Thm. 1, Cor. 41; ``docs/algorithms/transductive.md``.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from learners._constraints import Boolean, Constraint, Interval, NoneOr, Options
from learners.base import Learner, Prediction, StateSize, StepReport
from learners.transductive.block import BlockMixin
from learners.transductive.sparse_prior import column_scales, gibbs_predict
from learners.transductive.whitening import whitening

_POS = Interval(0.0, math.inf, closed="neither")
_FALLBACK_HINT = "; configure fallback='vaw' to answer anyway"


class TransductiveRegressor(BlockMixin, Learner):
    """Transductive VAW: exponential weights with a prior built from a registered block.

    Register the block of upcoming design vectors with ``register(vectors)`` (T x d),
    then ``predict``/``learn`` each of them once, in any order (spec §1.1). A vector that is
    not in the block, or whose multiplicity is used up, raises ``ValueError`` unless
    ``fallback="vaw"``, in which case an ordinary (inductive) VAW answers and the report's
    diagnostic ``transductive`` is 0. The transductive state is never extended mid-block
    (spec §14): a new ``register`` starts a fresh block with a fresh prior.

    Parameters
    ----------
    dim : int
        Number of features.
    lam : float or None, default=None
        Prior strength lambda in the regulariser lam * G_T; ``None`` uses d / T of each block
        (spec §3.1, "(5)").
    Y : float, default=1.0
        Label bound; used only for clipping (the unclipped prediction does not depend on Y).
    clip : bool, default=False
        Clip predictions to [-Y, Y] and the labels used in updates (spec §13.4 (a)); labels
        with |y| > Y are counted either way.
    mode : {"vaw", "ridge", "sparse"}, default="vaw"
        ``"vaw"``: x_t^T (lam G_T + G_t)^-1 b_{t-1} (Theorem 1); ``"ridge"``: transductive
        ridge x_t^T (lam G_T + G_{t-1})^-1 b_{t-1} (Cor. 41 with ``clip=True``);
        ``"sparse"``: the column-scaled Student-t prior of §4 (Theorem 3), predicted by
        Rao-Blackwellised Gibbs (§4.4; O((burn_in + sweeps) d^3) per round, labels always
        clipped to [-Y, Y] for the update since eta = 1/(2Y^2) depends on Y).
    fallback : {None, "vaw"}, default=None
        Inductive learner for vectors outside the block: isotropic VAW with ``fallback_lam``.
        It learns from every labelled event, in the block or not.
    fallback_lam : float, default=1.0
        Regulariser of the fallback VAW.
    tau : float or None, default=None
        ``"sparse"`` only: prior scale, tau_j = tau / |X_j|; ``None`` is Y sqrt(1/d), the
        Theorem 3 choice Y sqrt(s/d) for sparsity s = 1.
    sweeps, burn_in : int, default=50, 10
        ``"sparse"`` only: recorded and discarded Gibbs sweeps per round (§4.4 defaults).
    seed : int, default=0
        ``"sparse"`` only: seed of the sampler's random generator (kept in the state).

    Attributes
    ----------
    block_ : ndarray of shape (T, dim)
        The registered block, rows sorted (the prior depends on the multiset only).
    remaining_ : ndarray of shape (T,)
        1 for block rows not yet labelled, 0 once used.
    W_ : ndarray of shape (r, dim)
        Whitening map: W G_T W^T = I_r on range(G_T), r = rank(G_T).
    M_ : ndarray of shape (r, r)
        (lam I + sum_{s<t} z_s z_s^T)^-1 in whitened coordinates z = W x.
    Gt_, bt_ : ndarrays
        Whitened Gram matrix and sum y z of the labelled prefix of the block.
    lam_ : float
        Lambda in force for the current block.
    label_clipped_, unregistered_ : int
        Labels with |y| > Y, and events answered by the fallback (spec §14 counters).

    ``register`` returns ``{"block", "T", "d_eff", "lam", "mode", "distinct",
    "previous_remaining", "regret_bound"}``; ``block_report()`` gives the block's cumulative
    loss, hindsight loss (min over theta on the labelled prefix), regret and bound. In-block
    steps report the diagnostics ``transductive`` (1.0; 0.0 for fallback answers),
    ``label_clipped``, ``leverage``, ``block_remaining``, ``block_loss``, ``regret_bound``
    (``mc_stderr`` instead of the last two in ``"sparse"`` mode).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)) * [1e-3, 1e3]   # wildly scaled design
    >>> y = np.clip(X @ [300.0, 2e-4] + 0.1 * rng.normal(size=200), -1, 1)
    >>> model = TransductiveRegressor(2)
    >>> model.register(X)["T"]
    200
    >>> losses = [model.learn(x, v).loss for x, v in zip(X, y)]
    >>> print(round(float(np.mean(losses[100:])), 3))
    0.008
    >>> rep = model.block_report()
    >>> bool(0 < rep["cumulative_regret"] < rep["regret_bound"])
    True
    >>> model.predict([1.0, 2.0])
    Traceback (most recent call last):
    ...
    learners.base.Unanswerable: transductive: x is not in the registered block ...

    References
    ----------
    Qian, Rakhlin, Zhivotovskiy (arXiv 2410.21621), Thm. 1; Gaillard et al. (2019), Thm. 7;
    ``docs/algorithms/transductive.md``.
    """

    kind: ClassVar[str] = "transductive"
    lam: float | None
    Y: float
    clip: bool
    mode: str
    fallback: str | None
    fallback_lam: float
    tau: float | None
    sweeps: int
    burn_in: int
    seed: int
    max_dim: ClassVar[int] = 2000
    #: refactor M from the Gram matrix every this many rounds (spec §3.4 hygiene).
    refresh_every: ClassVar[int] = 10_000
    _constraints: ClassVar[dict[str, Constraint]] = {
        "lam": NoneOr(_POS),
        "Y": _POS,
        "clip": Boolean(),
        "mode": Options(("vaw", "ridge", "sparse")),
        "fallback": NoneOr(Options(("vaw",))),
        "fallback_lam": _POS,
        "tau": NoneOr(_POS),
        "sweeps": Interval(2, 100_000, integer=True),
        "burn_in": Interval(0, 100_000, integer=True),
        "seed": Interval(0, 2**63 - 1, integer=True),
    }

    def __init__(
        self,
        dim: int,
        *,
        lam: float | None = None,
        Y: float = 1.0,
        clip: bool = False,
        mode: str = "vaw",
        fallback: str | None = None,
        fallback_lam: float = 1.0,
        tau: float | None = None,
        sweeps: int = 50,
        burn_in: int = 10,
        seed: int = 0,
    ):
        self._init_from(locals())
        d = self.dim
        self.block_ = np.zeros((0, d))
        self.remaining_ = np.zeros(0, dtype=np.int64)
        self.W_ = np.zeros((0, d))
        self.M_ = np.zeros((0, 0))
        self.Gt_ = np.zeros((0, 0))
        self.bt_ = np.zeros(0)
        self.lam_ = 0.0
        self.block_t_ = 0
        self.block_count_ = 0
        self.block_loss_ = 0.0
        self.block_sum_y2_ = 0.0
        self.label_clipped_ = 0
        self.unregistered_ = 0
        if mode == "sparse":
            self.tau_j_ = np.ones(d)
            self.omega_ = np.ones(d)
            rng = np.random.default_rng(seed)
            self.rng_state_ = json.dumps(rng.bit_generator.state)
            self.mc_stderr_ = 0.0
        if fallback is not None:
            self.fb_P_ = np.eye(d) / fallback_lam
            self.fb_q_ = np.zeros(d)
        self._index: dict[bytes, list[int]] = {}

    # ---- memory -----------------------------------------------------------------------
    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any], block: int | None = None) -> StateSize:
        T = cls.largest_block(d) if block is None else int(block)
        fb = int(p["fallback"] is not None)  # the fallback VAW: fb_P_ (d x d), fb_q_ (d)
        terms = [(8, "T*d", T * d), (8, "T", T)]  # block_ and remaining_
        if p["mode"] == "sparse":  # W_ = I and Gt_ (d x d), bt_, tau_j_, omega_ (d)
            terms += [(16 + 8 * fb, "d^2", d * d), (24 + 8 * fb, "d", d)]
            return StateSize.of(*terms, where=f"T = {T} block vectors")
        r = min(T, d)  # rank of the block: W_ (r x d), M_ and Gt_ (r x r), bt_ (r)
        terms += [(8, "r*d", r * d), (16, "r^2", r * r), (8, "r", r)]
        if fb:
            terms += [(8, "d^2", d * d), (8, "d", d)]
        return StateSize.of(*terms, where=f"T = {T} block vectors, r = min(T, d)")

    # ---- block registration (spec §14) -----------------------------------------------
    def register(self, vectors: Any) -> dict[str, Any]:
        """Register a block of T upcoming design vectors (T x dim) before their labels.

        Starts a fresh block: new prior lam * G_T, lambda = d / T unless ``lam`` is set.
        Returns a summary dict; raises ``ValueError`` (state untouched) on a bad block.
        """
        X = self._check_block(vectors)
        T = X.shape[0]
        previous = int(self.remaining_.sum())
        lam = float(self.lam) if self.lam is not None else self.dim / T
        if self.mode == "sparse":
            # original coordinates: the Student prior is not rotation invariant (§4.1)
            W = np.eye(self.dim)
            tau = self.tau if self.tau is not None else self.Y * math.sqrt(1.0 / self.dim)
            self.tau_j_ = column_scales(X, float(tau))
            self.omega_ = np.ones(self.dim)
            self.M_ = np.zeros((0, 0))
        else:
            W = whitening(X)
            # whitened: lam G_T -> lam I_r, so M_0 = (lam I)^-1 (spec §3.4)
            self.M_ = np.eye(W.shape[0]) / lam
        r = W.shape[0]
        self.block_ = X
        self.remaining_ = np.ones(T, dtype=np.int64)
        self.W_ = W
        self.lam_ = lam
        self.Gt_ = np.zeros((r, r))
        self.bt_ = np.zeros(r)
        self.block_t_ = 0
        self.block_loss_ = 0.0
        self.block_sum_y2_ = 0.0
        self.block_count_ += 1
        self._build_index()
        return {
            "block": self.block_count_,
            "T": T,
            "d_eff": r,
            "lam": lam,
            "mode": self.mode,
            "distinct": len(self._index),
            "previous_remaining": previous,
            # JSON has no NaN: the sparse mode has no computable bound (needs kappa)
            "regret_bound": None if self.mode == "sparse" else self.regret_bound(),
        }

    def regret_bound(self) -> float:
        """Theorem 1 (or Cor. 41 for clipped ridge) bound for the whole block, |y| <= Y."""
        T = self.block_.shape[0]
        if T == 0:
            return 0.0
        if self.mode == "sparse":
            return math.nan  # Theorem 3 needs the design's kappa (Definition 2)
        r = self.W_.shape[0]
        c = 4.0 if self.mode == "ridge" else 1.0
        return self.lam_ * T * self.Y**2 + c * r * self.Y**2 * math.log1p(1.0 / self.lam_)

    def block_report(self) -> dict[str, float]:
        """Cumulative, hindsight (min over theta on the labelled prefix) loss and regret."""
        hind = self.block_sum_y2_
        if self.block_t_ > 0:
            # sum y^2 - b^T G_t^+ b (spec §14); in whitened coordinates G_t = Gt_
            hind -= float(self.bt_ @ np.linalg.pinv(self.Gt_, hermitian=True) @ self.bt_)
        hind = max(hind, 0.0)
        return {
            "cumulative_loss": self.block_loss_,
            "hindsight_loss": hind,
            "cumulative_regret": self.block_loss_ - hind,
            "regret_bound": self.regret_bound(),
            "block_t": float(self.block_t_),
            "block_remaining": float(self.block_remaining),
        }

    # ---- predictions -----------------------------------------------------------------
    def _clip(self, v: float) -> float:
        return min(self.Y, max(-self.Y, v)) if self.clip else v

    def _block_predict(self, z: np.ndarray) -> tuple[float, np.ndarray, float]:
        Mz = self.M_ @ z
        s = float(z @ Mz)
        raw = float(Mz @ self.bt_)
        if self.mode == "vaw":
            # z^T (A_{t-1} + z z^T)^-1 b = z^T M b / (1 + z^T M z)  (Sherman-Morrison, §3.1)
            raw /= 1.0 + s
        return raw, Mz, s

    def _sparse_predict(self, x: np.ndarray) -> tuple[float, np.ndarray, float, str]:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = json.loads(self.rng_state_)
        y_hat, omega, stderr = gibbs_predict(
            x,
            self.Gt_ + np.outer(x, x),  # G_t includes x_t (§4.2)
            self.bt_,
            self.tau_j_,
            self.omega_,
            rng,
            Y=self.Y,
            burn_in=self.burn_in,
            sweeps=self.sweeps,
        )
        return y_hat, omega, stderr, json.dumps(rng.bit_generator.state)

    def _fallback_predict(self, x: np.ndarray) -> tuple[float, np.ndarray, float]:
        Px = self.fb_P_ @ x
        s = float(x @ Px)
        return float(Px @ self.fb_q_) / (1.0 + s), Px, s

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        i = self._find(x)
        if i >= 0:
            if self.mode == "sparse":
                return Prediction(self._clip(self._sparse_predict(x)[0]))
            return Prediction(self._clip(self._block_predict(self.W_ @ x)[0]))
        if self.fallback is None:
            raise self._unregistered_error(_FALLBACK_HINT)
        return Prediction(self._clip(self._fallback_predict(x)[0]))

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        i = self._find(x)
        if i < 0 and self.fallback is None:
            raise self._unregistered_error(_FALLBACK_HINT)
        clipped = abs(y) > self.Y
        y_upd = min(self.Y, max(-self.Y, y)) if self.clip or self.mode == "sparse" else y
        diag: dict[str, float] = {"transductive": float(i >= 0), "label_clipped": float(clipped)}
        if self.fallback is not None:
            fb_pred, Px, s_fb = self._fallback_predict(x)
            self.fb_P_ = self.fb_P_ - np.outer(Px, Px) / (1.0 + s_fb)
            self.fb_q_ = self.fb_q_ + y_upd * x
        if i >= 0 and self.mode == "sparse":
            raw, self.omega_, self.mc_stderr_, self.rng_state_ = self._sparse_predict(x)
            pred = self._clip(raw)
            self.remaining_[i] = 0
            self.block_t_ += 1
            self.Gt_ = self.Gt_ + np.outer(x, x)
            self.bt_ = self.bt_ + y_upd * x
            loss = (pred - y) ** 2
            self.block_loss_ += loss
            self.block_sum_y2_ += y_upd * y_upd
            diag["mc_stderr"] = self.mc_stderr_
            diag["block_remaining"] = float(self.block_remaining)
            diag["block_loss"] = self.block_loss_
        elif i >= 0:
            z = self.W_ @ x
            raw, Mz, s = self._block_predict(z)
            pred = self._clip(raw)
            self.remaining_[i] = 0
            self.block_t_ += 1
            if self.block_t_ % self.refresh_every == 0:
                self.Gt_ = self.Gt_ + np.outer(z, z)
                self.M_ = _refactor(self.lam_, self.Gt_)
            else:
                self.M_ = self.M_ - np.outer(Mz, Mz) / (1.0 + s)
                self.Gt_ = self.Gt_ + np.outer(z, z)
            self.bt_ = self.bt_ + y_upd * z
            loss = (pred - y) ** 2
            self.block_loss_ += loss
            self.block_sum_y2_ += y_upd * y_upd
            diag["leverage"] = s / (1.0 + s)  # h_t = z^T A_t^-1 z (spec §3.2)
            diag["block_remaining"] = float(self.block_remaining)
            diag["block_loss"] = self.block_loss_
            diag["regret_bound"] = self.regret_bound()
        else:
            pred = self._clip(fb_pred)
            loss = (pred - y) ** 2
            self.unregistered_ += 1
        self.label_clipped_ += int(clipped)
        return StepReport(prediction=pred, loss=loss, diagnostics=diag)

    # ---- contract-test hooks ---------------------------------------------------------
    def _test_prepare(self, X: np.ndarray) -> None:
        # the contract test also queries and learns the zero vector: put it in the block
        self.register(np.vstack([X, np.zeros((1, self.dim))]))

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"mode": "ridge", "clip": True, "Y": 2.0, "lam": 0.1},
            {"fallback": "vaw", "clip": True},
            {"mode": "sparse", "sweeps": 4, "burn_in": 1, "seed": 3},
        ]


def _refactor(lam: float, G: np.ndarray) -> np.ndarray:
    """(lam I + G)^-1 from scratch, via Cholesky (spec §3.4: refresh every 10^4 rounds)."""
    L = np.linalg.cholesky(lam * np.eye(G.shape[0]) + G)
    Linv = np.linalg.inv(L)
    return Linv.T @ Linv
