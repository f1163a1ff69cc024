"""Shared machinery of the online quantifiers: labels, windows, estimators, NEMSIS core.

* Labels are -1/+1 (0/1 and booleans mapped); ``y=None`` is an unlabelled event, which only
  scores ``x`` with the served model and enters the prevalence window (spec §3.2).
* Labelled events are first scored with the served model (prequential, "test-then-train"),
  and that held-out score goes into a calibration window used by ACC / PCC / PACC (§3.1:
  TPR/TNR of the served model on a held-out labelled window), then the learner updates.
* ``_NemsisCore`` is Algorithm 1 (§2.3), shared by ``nemsis`` and the inner runs of ``scan``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Boolean, Constraint, Interval, NoneOr, Options
from learners.base import BatchInterrupted, Learner, Prediction, StateSize, StepReport
from learners.quantification import estimators as est
from learners.quantification import nested

_LABELS = {1: 1, -1: -1, 0: -1}
#: nested.py's inner-function codes as the compiled kernels' (learners/_kernels.py BA ...)
_INNER_CODE = {"ba": 0, "logpos": 1, "logneg": 2, "nss": 3, "negkld": 4}


def check_binary_label(y: Any, *, allow_none: bool) -> int | None:
    """Map a label to -1/+1; accepts -1/+1, 0/1 and booleans (``None`` if allowed)."""
    if y is None:
        if allow_none:
            return None
        raise ValueError("y must be -1/+1, 0/1 or a boolean, got None")
    if isinstance(y, bool | np.bool_):
        return 1 if y else -1
    if isinstance(y, int | float | np.integer | np.floating):
        v = float(y)
        if v.is_integer() and int(v) in _LABELS:
            return _LABELS[int(v)]
    raise ValueError(f"y must be -1/+1, 0/1, a boolean or None (unlabelled), got {y!r}")


class _Quantifier(Learner):
    """Base of the binary online quantifiers (not registered: no ``kind``)."""

    task: ClassVar[str] = "classification"
    preprocess_refused: ClassVar[dict[str, str]] = {
        "intercept": "a quantifier has its own constant feature: its 'fit_intercept' parameter",
    }
    _common_constraints: ClassVar[dict[str, Constraint]] = {
        "ns": Boolean(),
        "eta0": Interval(0.0, math.inf, closed="neither"),
        "radius": Interval(0.0, math.inf, closed="neither"),
        "reward": Options(("hinge", "logistic")),
        "prior": NoneOr(Interval(0.0, 1.0, closed="neither")),
        "eps": NoneOr(Interval(0.0, 1.0, closed="right")),
        "kappa": Options(("max", "paper_table")),
        "window": Interval(2, 10**7, integer=True),
        "fit_intercept": Boolean(),
    }

    ns: bool
    eta0: float
    radius: float
    reward: str
    prior: float | None
    eps: float | None
    kappa: str
    window: int
    fit_intercept: bool
    w_: np.ndarray
    w_sum_: np.ndarray
    t_: int
    sum_r_: np.ndarray
    sum_q_: np.ndarray
    rho_: np.ndarray
    z_: np.ndarray
    dual_alpha_: np.ndarray
    dual_beta_: np.ndarray
    dual_gamma_: np.ndarray
    n_pos_: int
    n_neg_: int
    pos_weight_: float
    neg_weight_: float
    weight_: float
    cal_scores_: np.ndarray
    cal_labels_: np.ndarray
    cal_count_: int
    unl_scores_: np.ndarray
    unl_count_: int
    unl_pos_: int

    #: weight vectors over the d (+ intercept) features: w_ and w_sum_ (scan adds w_out_)
    _weight_vectors: ClassVar[int] = 2

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        # the weight vectors, three rings of `window` scores and labels (cal_scores_,
        # cal_labels_, unl_scores_) and seven 2-vectors (sum_r_ ... dual_gamma_)
        n, window = cls._weight_vectors, int(p["window"])
        return StateSize.of(
            (8 * n, "d", d),
            (24, "window", window),
            (8 * n * int(p["fit_intercept"]) + 112, "", 1),
            where=f"window = {window}",
        )

    # ---- construction helpers ------------------------------------------------------------
    def _init_common_state(self) -> None:
        D = self.dim + (1 if self.fit_intercept else 0)
        W = int(self.window)
        self.n_pos_ = 0
        self.n_neg_ = 0
        self.pos_weight_ = 0.0  # (discounted) class counts behind the running prior
        self.neg_weight_ = 0.0
        self.cal_scores_ = np.zeros(W)
        self.cal_labels_ = np.zeros(W)
        self.cal_count_ = 0
        self.unl_scores_ = np.zeros(W)
        self.unl_count_ = 0
        self.unl_pos_ = 0
        self._nemsis_init(np.zeros(D))

    @property
    def n_features(self) -> int:
        return self.dim + (1 if self.fit_intercept else 0)

    def _augment(self, x: np.ndarray) -> np.ndarray:
        # spec §8 item 7: a constant feature inside the L2 ball lets the threshold move
        if not self.fit_intercept:
            return x
        xb = np.empty(x.shape[0] + 1)
        xb[:-1] = x
        xb[-1] = 1.0
        return xb

    def _eps(self) -> float:
        """Training smoothing eps: given, or 1/(2 W) for the window W (spec §2.7)."""
        return float(self.eps) if self.eps is not None else 1.0 / (2.0 * self.window)

    def _prior(self) -> float:
        """p: fixed, or the running estimate (n_pos + 1)/(n_labelled + 2) (spec §3.3)."""
        if self.prior is not None:
            return float(self.prior)
        return (self.pos_weight_ + 1.0) / (self.pos_weight_ + self.neg_weight_ + 2.0)

    def _decay(self) -> float:
        """Forgetting factor of the running sums: 1 (the paper's 1/t averages) unless a
        subclass enables the §3.4 forgetting mode."""
        return 1.0

    @property
    def class_prior(self) -> float:
        """The prior p used in the class-normalised rewards (fixed or running)."""
        return self._prior()

    # ---- served model --------------------------------------------------------------------
    def _served(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def weights(self) -> np.ndarray:
        """The served weight vector over the ``dim`` features (read-only copy)."""
        w = self._served()[: self.dim].copy()
        w.flags.writeable = False
        return w

    @property
    def intercept(self) -> float:
        """The served weight of the constant feature (0 without ``fit_intercept``)."""
        return float(self._served()[-1]) if self.fit_intercept else 0.0

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``<w, x>`` of the served model for a batch (rows validated)."""
        rows = self._check_batch(X)
        w = self._served()
        scores = rows @ w[: self.dim]
        return scores + w[-1] if self.fit_intercept else scores

    def _check_batch(
        self, X: Any, *, allow_empty: bool = False, allow_vector: bool = True
    ) -> np.ndarray:
        try:
            arr = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"X must be a matrix of numbers: {exc}") from None
        if allow_vector and arr.ndim == 1 and arr.shape[0] == self.dim:
            arr = arr[None, :]
        if allow_empty and arr.size == 0:
            return np.empty((0, self.dim))
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"X must have shape (n, {self.dim}), got {tuple(arr.shape)}")
        if arr.shape[0] == 0:
            raise ValueError("X must contain at least one row")
        if not np.all(np.isfinite(arr)):
            raise ValueError("X must contain only finite numbers (no NaN or inf)")
        return arr

    # ---- labels --------------------------------------------------------------------------
    def _check_y(self, y: Any) -> int | None:
        return check_binary_label(y, allow_none=True)

    @classmethod
    def _test_bad_labels(cls) -> list[Any]:
        # None is valid here: it marks an unlabelled event
        return [float("nan"), float("inf"), "1.0", 2, 0.5, -3]

    @classmethod
    def _test_stream(cls, dim: int, n: int, seed: int) -> tuple[np.ndarray, list[Any]]:
        """Gaussian classes around +-u with about one event in six unlabelled."""
        rng = np.random.default_rng(seed)
        u = rng.normal(size=dim)
        u /= np.linalg.norm(u)
        y = np.where(rng.random(n) < 0.3, 1, -1)
        X = rng.normal(size=(n, dim)) + 0.75 * y[:, None] * u
        labels: list[Any] = [int(v) for v in y]
        for i in range(n):
            if i % 6 == 5:
                labels[i] = None
        return X, labels

    # ---- the contract --------------------------------------------------------------------
    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        s = float(self._served() @ self._augment(x))
        return Prediction(1 if s > 0.0 else -1, {"margin": s})

    def _predict_proba(self, x: np.ndarray, hint: float | None) -> dict[Any, float]:
        return self._predict_proba_rows([x], [hint])[0]

    def _predict_proba_rows(
        self, rows: list[np.ndarray], hints: list[float | None]
    ) -> list[dict[Any, float]]:
        """sigma(a s + b) with the Platt fit of ``calibration()`` (PCC's); the class prior
        while the labelled window lacks a class (docs/probabilities.md). The fit (~0.5 ms)
        is kept until the next labelled event changes the window (``cal_count_``)."""
        memo = getattr(self, "_proba_calibration", None)
        if memo is None or memo[0] != self.cal_count_:
            memo = (self.cal_count_, self.calibration())
            self._proba_calibration = memo  # a cache, not learned state
        cal = memo[1]
        w = self._served()
        out = []
        for x in rows:
            if cal is None:
                p = self._prior()
            else:
                z = cal.a * float(w @ self._augment(x)) + cal.b
                p = 1.0 / (1.0 + math.exp(-z)) if z >= 0.0 else math.exp(z) / (1.0 + math.exp(z))
            out.append({-1: 1.0 - p, 1: p})
        return out

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        xb = self._augment(x)
        s = float(self._served() @ xb)
        pred = 1 if s > 0.0 else -1
        W = int(self.window)
        if y is None:
            # §3.2: an unlabelled vector only enters the prevalence window
            i = self.unl_count_ % W
            if self.unl_count_ >= W and self.unl_scores_[i] > 0.0:
                self.unl_pos_ -= 1
            self.unl_scores_[i] = s
            self.unl_pos_ += 1 if s > 0.0 else 0
            self.unl_count_ += 1
            return StepReport(pred, 0.0, self._diagnostics(labelled=False), {"margin": s})
        i = self.cal_count_ % W
        self.cal_scores_[i] = s
        self.cal_labels_[i] = float(y)
        self.cal_count_ += 1
        lam = self._decay()
        if y > 0:
            self.n_pos_ += 1
        else:
            self.n_neg_ += 1
        self.pos_weight_ = lam * self.pos_weight_ + (1.0 if y > 0 else 0.0)
        self.neg_weight_ = lam * self.neg_weight_ + (0.0 if y > 0 else 1.0)
        extra = self._update(xb, int(y))
        diag = self._diagnostics(labelled=True)
        diag.update(extra)
        return StepReport(pred, float(pred != y), diag, {"margin": s})

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> list[StepReport]:
        """``learn`` on each row in order; identical to the loop, but the rows are validated
        as one matrix (the per-row checks dominate a NEMSIS step). A bad row or label rejects
        the whole batch before any state changes."""
        rows = self._check_batch(X, allow_empty=True, allow_vector=False)
        labels = [self._check_y(v) for v in y]
        hs = [None] * len(rows) if hints is None else [self._check_hint(h) for h in hints]
        if not len(rows) == len(labels) == len(hs):
            raise ValueError("X, y and hints must have the same length")
        reports: list[StepReport] = []
        try:
            for x, v, h in zip(rows, labels, hs, strict=True):
                reports.append(self._learn(x, v, h))
        except ValueError as exc:
            raise BatchInterrupted(len(reports), reports, exc) from exc
        return reports

    def _update(self, xb: np.ndarray, y: int) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError

    def _diagnostics(self, *, labelled: bool) -> dict[str, float]:
        n_win = min(self.unl_count_, int(self.window))
        d = {
            "labelled": 1.0 if labelled else 0.0,
            "prior": self._prior(),
            "window_size": float(n_win),
        }
        if n_win:
            d["prevalence_cc"] = self.unl_pos_ / n_win
        return d

    # ---- prevalence estimation -----------------------------------------------------------
    def calibration(self) -> est.Calibration | None:
        """ACC/PCC/PACC statistics of the served model on the labelled window (None if the
        window lacks a class). Prequential: each score predates the update on its label."""
        n = min(self.cal_count_, int(self.window))
        if n == 0:
            return None
        labels = self.cal_labels_[:n]
        if not (labels > 0).any() or (labels > 0).all():
            return None
        return est.Calibration.fit(self.cal_scores_[:n], labels)

    def quantify(self, X: Any, method: str = est.DEFAULT_METHOD) -> float:
        """Positive-class prevalence of the batch ``X`` in [0, 1].

        ``method``: ``"pacc"`` (the default, chosen by measurement), ``"cc"`` (classify and
        count, the paper's estimator), ``"acc"`` or ``"pcc"`` (spec §1.2 [EXT]); all but
        CC use the calibration window and fall back to CC until it holds both classes.
        """
        if method not in est.METHODS:
            raise ValueError(f"unknown method={method!r}; valid ones are {list(est.METHODS)}")
        scores = self.decision_function(X)
        return est.estimate(scores, method, self.calibration() if method != "cc" else None)

    def window_prevalence(self, method: str = est.DEFAULT_METHOD) -> float:
        """Prevalence estimate over the last ``window`` unlabelled events (nan if none), by
        ``method`` as in ``quantify``. The per-event diagnostic ``prevalence_cc`` is the
        CC one: refitting the calibration for PACC on every event would dominate a step."""
        if method not in est.METHODS:
            raise ValueError(f"unknown method={method!r}; valid ones are {list(est.METHODS)}")
        n = min(self.unl_count_, int(self.window))
        if n == 0:
            return float("nan")
        cal = self.calibration() if method != "cc" else None
        return est.estimate(self.unl_scores_[:n], method, cal)

    # ---- NEMSIS core (Algorithm 1, spec §2.3) --------------------------------------------
    def _inner_codes(self) -> tuple[str, str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _gamma(self, q1: float, q2: float, p: float, eps: float) -> tuple[float, float]:
        raise NotImplementedError  # pragma: no cover - abstract

    def _nemsis_init(self, w0: np.ndarray) -> None:
        """Fresh NEMSIS instance warm-started at ``w0``; duals at rho0 = (1/2, 1/2) (§8.2)."""
        self.w_ = w0.copy()
        self.w_sum_ = np.zeros_like(w0)
        self.t_ = 0
        self.weight_ = 0.0  # sum of the averaging weights (= t_ without forgetting)
        self.sum_r_ = np.zeros(2)
        self.sum_q_ = np.zeros(2)
        for name in ("rho_", "z_", "dual_alpha_", "dual_beta_", "dual_gamma_"):
            setattr(self, name, np.zeros(2))
        self._set_duals(0.5, 0.5, None)

    def _set_duals(self, r1: float, r2: float, qbar: tuple[float, float] | None) -> None:
        """Algorithm 1 lines 15-17: alpha = grad zeta1(rho), beta = grad zeta2(rho),
        gamma = grad Psi(q_bar) (Lemma 7); z = zeta(rho) for the Fenchel-Young form."""
        p, eps = self._prior(), self._eps()
        k = nested.kappa_value(p, self.kappa)
        c1, c2 = self._inner_codes()
        z1, z2 = nested.zeta(c1, r1, r2, p, eps, k), nested.zeta(c2, r1, r2, p, eps, k)
        q1, q2 = (z1, z2) if qbar is None else qbar
        a1, a2 = nested.zeta_grad(c1, r1, r2, p, eps, k)
        b1, b2 = nested.zeta_grad(c2, r1, r2, p, eps, k)
        g1, g2 = self._gamma(q1, q2, p, eps)
        # in-place writes of plain floats: this runs once per event
        rho, z, al, be, ga = self.rho_, self.z_, self.dual_alpha_, self.dual_beta_, self.dual_gamma_
        rho[0], rho[1], z[0], z[1] = r1, r2, z1, z2
        al[0], al[1], be[0], be[1], ga[0], ga[1] = a1, a2, b1, b2, g1, g2

    def _gamma_code(self) -> tuple[int, float]:  # pragma: no cover - abstract
        """The compiled kernels' gamma kind (learners/_kernels.py PSI_Q ...) and its
        parameter, for the measure ``_gamma`` computes."""
        raise NotImplementedError

    def _nemsis_step(self, xb: np.ndarray, y: int) -> dict[str, float]:
        k = _accel.get()
        if k is not None:
            return self._nemsis_step_compiled(k, xb, y)
        p = self._prior()
        n = 1.0 - p
        w = self.w_
        score = float(w @ xb)
        m = y * score  # step 1, with the model held before this point
        a1, a2 = self.dual_alpha_.tolist()
        b1, b2 = self.dual_beta_.tolist()
        g1, g2 = self.dual_gamma_.tolist()
        if self.reward == "hinge":  # r = min{1, m} (§2.1, the "max" is a typo)
            r = min(1.0, m)
            dr = 1.0 if m < 1.0 else 0.0
        else:  # r = 1 - ln(1 + e^{-m}); dr/dm = sigma(-m)
            r = 1.0 - float(np.logaddexp(0.0, -m))
            dr = 1.0 / (1.0 + math.exp(m)) if m > -700.0 else 1.0
        g = (1.0 if m > 0.0 else 0.0) if self.ns else r  # step 2
        if y > 0:  # step 3
            s1, s2 = g / p, 0.0
            c = g1 * a1 + g2 * b1
            scale = dr / p
        else:
            s1, s2 = 0.0, g / n
            c = g1 * a2 + g2 * b2
            scale = dr / n
        lam = self._decay()
        self.t_ += 1
        t = self.t_
        # eta_t = eta0/sqrt(t); the forgetting mode floors it at eta0/sqrt(half_life)
        eta = self.eta0 / math.sqrt(t if lam == 1.0 else min(t, self._half_life()))
        if scale != 0.0 and c != 0.0:  # step 4: w <- Proj(w + eta c G), G = scale y x
            w = w + (eta * c * scale * y) * xb
            norm = math.sqrt(float(w @ w))
            if norm > self.radius:
                w = w * (self.radius / norm)
            self.w_ = w
        if lam != 1.0:
            self.w_sum_ *= lam
        self.w_sum_ += self.w_  # step 5
        self.weight_ = lam * self.weight_ + 1.0
        norm = self.weight_
        r1, r2 = self.rho_.tolist()
        z1, z2 = self.z_.tolist()
        # step 6: pi = zeta(rho) + <grad, s - rho> (Fenchel-Young form of alpha.s - zeta*)
        pi1 = z1 + a1 * (s1 - r1) + a2 * (s2 - r2)
        pi2 = z2 + b1 * (s1 - r1) + b2 * (s2 - r2)
        sr, sq = self.sum_r_, self.sum_q_  # step 7
        sr1, sr2 = lam * float(sr[0]) + s1, lam * float(sr[1]) + s2
        sq1, sq2 = lam * float(sq[0]) + pi1, lam * float(sq[1]) + pi2
        sr[0], sr[1], sq[0], sq[1] = sr1, sr2, sq1, sq2
        rb1, rb2 = sr1 / norm, sr2 / norm  # running means (exponential ones when forgetting)
        qb1, qb2 = sq1 / norm, sq2 / norm
        # step 8: rho = clip(r_bar, 0, 1) [EXT guard, §8 item 4]
        self._set_duals(min(1.0, max(0.0, rb1)), min(1.0, max(0.0, rb2)), (qb1, qb2))
        return {"eta": eta, "c": c, "tpr_bar": rb1, "tnr_bar": rb2}

    def _nemsis_step_compiled(self, k: Any, xb: np.ndarray, y: int) -> dict[str, float]:
        """_nemsis_step in one compiled call (learners/_kernels.py ``nemsis_step``): the
        same operations, w.x and w.w summed in index order."""
        p = self._prior()
        gkind, par = self._gamma_code()
        c1, c2 = self._inner_codes()
        cfg = (
            p,
            self._eps(),
            nested.kappa_value(p, self.kappa),
            float(self.eta0),
            float(self.radius),
            self._decay(),
            float(self._half_life()),
            float(self.t_),
            float(self.weight_),
            float(par),
        )
        codes = (
            _INNER_CODE[c1],
            _INNER_CODE[c2],
            gkind,
            int(self.reward == "logistic"),
            int(self.ns),
        )
        w2, out = np.empty_like(self.w_), np.empty(7)
        k.nemsis_step(
            self.w_, self.w_sum_, xb, float(y), cfg, codes, self.sum_r_, self.sum_q_,
            self.rho_, self.z_, self.dual_alpha_, self.dual_beta_, self.dual_gamma_, w2, out,
        )  # fmt: skip
        eta, c, rb1, rb2, t, weight, moved = out.tolist()
        if moved:
            self.w_ = w2
        self.t_ = int(t)
        self.weight_ = weight
        return {"eta": eta, "c": c, "tpr_bar": rb1, "tnr_bar": rb2}

    def _nemsis_average(self) -> np.ndarray:
        """The averaged iterate w_bar = w_sum / t (the paper's output); w before any step."""
        return self.w_sum_ / self.weight_ if self.t_ > 0 else self.w_.copy()

    def _half_life(self) -> float:
        return math.inf
