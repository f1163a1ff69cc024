"""Transductive Gaussian Bayes mixture for the logistic loss (docs/algorithms/transductive.md).

The service's ``tlogistic-gauss`` (§6.5): one partial-EW expert with S = X, i.e. the Bayes
mixture p_t(y) = E_{P_t} sigma(y theta.x_t) under the transductive prior
exp(-(lam/2) sum_{x in X} (theta.x)^2) (Definition 11). Its regret is at most
(lam/2) sum (theta*.x)^2 + (d/2) log(1 + 1/(4 lam)) (Proposition 15), it is invariant under
x -> A x, and the posterior is strictly log-concave, so it is sampled by MALA (§6.4).

The slab-expert aggregate of Algorithm 1 (Theorem 13) is exponential in d (§13.7); it is
available offline, exactly, for d = 1 in :mod:`learners.transductive.offline.slab_1d`.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from learners._classifier import BinaryClassifier
from learners._constraints import Constraint, Interval, NoneOr
from learners.base import StateSize
from learners.transductive.block import BlockMixin, row_key
from learners.transductive.mala import mala
from learners.transductive.whitening import whitening


def log_sigmoid(z: np.ndarray) -> np.ndarray:
    """log sigma(z) = -log(1 + e^-z), stable for any z."""
    return -np.logaddexp(0.0, -z)


class TransductiveLogistic(BlockMixin, BinaryClassifier):
    """Logistic Bayes mixture with a transductive Gaussian prior, sampled by MALA.

    Register the block of upcoming design vectors with ``register(vectors)``, then
    ``predict``/``learn`` each of them once (labels -1/+1, 0/1 or booleans). A vector outside
    the block raises ``ValueError``. The prediction is the label of the larger predictive
    probability; ``scores["margin"]`` is log p(+1) - log p(-1) and the step diagnostics
    carry ``p_plus``, its Monte Carlo standard error and the log loss.

    Parameters
    ----------
    dim : int
        Number of features.
    lam : float or None, default=None
        Prior strength; ``None`` is 1/T of each block (spec §6.5).
    samples : int, default=200
        MALA samples per prediction (after the burn-in), averaged as E sigma(theta.x_t).
    burn_in : int, default=20
        MALA steps per round that adapt the step size and are discarded (warm start).
    seed : int, default=0
        Seed of the sampler's random generator (kept in the state).

    Attributes
    ----------
    block_, remaining_ : ndarrays
        The registered block (rows sorted) and the rows not yet labelled.
    W_ : ndarray of shape (r, dim)
        Whitening map (G_T -> I_r); the sampler works in phi-coordinates, theta.x = phi.(W x).
    labels_ : ndarray of shape (T,)
        The label of each labelled block row (0.0 while unlabelled).
    phi_ : ndarray of shape (r,)
        Current state of the Markov chain (warm start of the next round).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(80, 2)) * [1e-3, 1e3]     # scale-free: any design scale works
    >>> y = np.where(X @ [1e3, 1e-3] + 0.3 * rng.normal(size=80) > 0, 1, -1)
    >>> model = TransductiveLogistic(2, samples=50)
    >>> model.register(X)["T"]
    80
    >>> mistakes = [model.learn(x, v).loss for x, v in zip(X, y)]
    >>> print(int(sum(mistakes[40:])))
    4

    References
    ----------
    Qian, Rakhlin, Zhivotovskiy (arXiv 2410.21621), Definition 11, Proposition 15;
    ``docs/algorithms/transductive.md``.
    """

    kind: ClassVar[str] = "transductive-logistic"
    max_dim: ClassVar[int] = 500
    lam: float | None
    samples: int
    burn_in: int
    seed: int
    _constraints: ClassVar[dict[str, Constraint]] = {
        "lam": NoneOr(Interval(0.0, math.inf, closed="neither")),
        "samples": Interval(2, 1_000_000, integer=True),
        "burn_in": Interval(0, 1_000_000, integer=True),
        "seed": Interval(0, 2**63 - 1, integer=True),
    }

    def __init__(
        self,
        dim: int,
        *,
        lam: float | None = None,
        samples: int = 200,
        burn_in: int = 20,
        seed: int = 0,
    ):
        self._init_params(dim, {"lam": lam, "samples": samples, "burn_in": burn_in, "seed": seed})
        d = self.dim
        self.block_ = np.zeros((0, d))
        self.remaining_ = np.zeros(0, dtype=np.int64)
        self.W_ = np.zeros((0, d))
        self.labels_ = np.zeros(0)
        self.phi_ = np.zeros(0)
        self.lam_ = 0.0
        self.log_step_ = 0.0
        self.accept_ = 0.0
        self.block_count_ = 0
        self.rng_state_ = json.dumps(np.random.default_rng(seed).bit_generator.state)
        self._index: dict[bytes, list[int]] = {}
        self._Z = np.zeros((0, 0))
        self._last: tuple[bytes, tuple[Any, ...]] | None = None

    # ---- memory -----------------------------------------------------------------------
    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any], block: int | None = None) -> StateSize:
        # block_ (T x d), remaining_ and labels_ (T), W_ (r x d), phi_ (r), r = rank <= d
        T = cls.largest_block(d) if block is None else int(block)
        r = min(T, d)
        return StateSize.of(
            (8, "T*d", T * d),
            (16, "T", T),
            (8, "r*d", r * d),
            (8, "r", r),
            where=f"T = {T} block vectors, r = min(T, d)",
        )

    # ---- block registration (spec §14) -----------------------------------------------
    def register(self, vectors: Any) -> dict[str, Any]:
        """Register a block of T upcoming design vectors (T x dim); starts a fresh prior."""
        X = self._check_block(vectors)
        T = X.shape[0]
        previous = int(self.remaining_.sum())
        self.block_ = X
        self.remaining_ = np.ones(T, dtype=np.int64)
        self.W_ = whitening(X)
        self.labels_ = np.zeros(T)
        self.phi_ = np.zeros(self.W_.shape[0])
        self.lam_ = float(self.lam) if self.lam is not None else 1.0 / T
        self.log_step_ = 0.0
        self.block_count_ += 1
        self._after_restore()
        r = self.W_.shape[0]
        return {
            "block": self.block_count_,
            "T": T,
            "d_eff": r,
            "lam": self.lam_,
            "distinct": len(self._index),
            "previous_remaining": previous,
            # Proposition 15 without the comparator term (lam/2) sum (theta*.x)^2
            "regret_bound_excess": 0.5 * r * math.log1p(1.0 / (4.0 * self.lam_)),
        }

    def _after_restore(self) -> None:
        self._build_index()
        self._Z = self.block_ @ self.W_.T  # whitened block rows
        self._last = None

    # ---- sampling ----------------------------------------------------------------------
    def _sample(self, z: np.ndarray) -> tuple[float, float, float, np.ndarray, float, float, str]:
        """MALA on P_t in preconditioned phi-coordinates; pure (the rng is a copy)."""
        done = self.labels_ != 0.0
        Zl, yl = self._Z[done], self.labels_[done]
        lam = self.lam_
        r = z.shape[0]
        # constant preconditioner for the round: the Hessian at the chain's position (§6.4)
        m = Zl @ self.phi_
        s = np.exp(log_sigmoid(m) + log_sigmoid(-m))
        H = lam * np.eye(r) + (Zl * s[:, None]).T @ Zl
        Linv = np.linalg.inv(np.linalg.cholesky(H))  # phi = Linv^T psi, so psi-Hessian ~ I

        def log_density(psi: np.ndarray) -> tuple[float, np.ndarray]:
            phi = Linv.T @ psi
            margins = yl * (Zl @ phi)
            val = -0.5 * lam * float(phi @ phi) + float(np.sum(log_sigmoid(margins)))
            grad = -lam * phi + Zl.T @ (yl * np.exp(log_sigmoid(-margins)))
            return val, Linv @ grad

        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = json.loads(self.rng_state_)
        psi0 = np.linalg.solve(Linv.T, self.phi_) if r else self.phi_
        psis, acc, step = mala(
            log_density,
            psi0,
            rng,
            step=math.exp(self.log_step_),
            burn_in=self.burn_in,
            n=self.samples,
        )
        f = (psis @ Linv) @ z  # theta.x_t = phi.z_t for every sample
        sig_p = np.exp(log_sigmoid(f))
        sig_m = np.exp(log_sigmoid(-f))
        p_plus, p_minus = float(sig_p.mean()), float(sig_m.mean())
        nb = min(10, self.samples)
        means = [b.mean() for b in np.array_split(sig_p, nb)]
        stderr = float(np.std(means, ddof=1) / math.sqrt(nb))
        phi_end = Linv.T @ psis[-1]
        return (
            p_plus,
            p_minus,
            stderr,
            phi_end,
            math.log(step),
            acc,
            json.dumps(rng.bit_generator.state),
        )

    def _score(self, x: np.ndarray) -> float:
        if self._find(x) < 0:
            raise self._unregistered_error()
        key = row_key(x) + self.rng_state_.encode()
        if self._last is None or self._last[0] != key:
            self._last = (key, self._sample(self.W_ @ x))
        p_plus, p_minus = self._last[1][:2]
        return math.log(p_plus) - math.log(p_minus)

    def _proba_plus(self, x: np.ndarray, m: float) -> float:
        # the mixture's own predictive probability: m = log p(+1) - log p(-1), so p = sigma(m)
        return 1.0 / (1.0 + math.exp(-m)) if m >= 0.0 else math.exp(m) / (1.0 + math.exp(m))

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        i = self._find(x)
        assert self._last is not None  # _score ran first (BinaryClassifier._learn)
        p_plus, _, stderr, phi, log_step, acc, rng_state = self._last[1]
        self._last = None
        self.remaining_[i] = 0
        self.labels_[i] = y
        self.phi_ = phi
        self.log_step_ = log_step
        self.accept_ = acc
        self.rng_state_ = rng_state
        return {
            "update": 1.0,
            "p_plus": p_plus,
            "mc_stderr": stderr,
            "acceptance": acc,
            "log_loss": float(np.logaddexp(0.0, -y * m)),
            "block_remaining": float(self.block_remaining),
        }

    # ---- contract-test hooks ---------------------------------------------------------
    def _test_prepare(self, X: np.ndarray) -> None:
        # the contract test also queries and learns the zero vector: put it in the block
        self.register(np.vstack([X, np.zeros((1, self.dim))]))

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{"samples": 10, "burn_in": 2}, {"lam": 0.5, "samples": 5, "burn_in": 0}]
