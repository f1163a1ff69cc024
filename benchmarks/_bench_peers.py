"""The peers of ``benchmarks/learners.py``: river, scikit-learn, naive numpy and CVXPY
implementations a user would otherwise pick, each behind the same two-method interface.

``learn(i)`` is the timed call (row ``i`` of the stream); ``learn_and_predict(i)`` returns
the prediction made before learning row ``i`` (used, untimed, to compare predictions).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from learners.pa import pa_step_size


class Peer:
    name = ""
    #: the same algorithm as ours, so predictions must agree (else only timing is compared)
    same = False

    def __init__(self, X: np.ndarray, y: list[Any]) -> None:
        self.X = X
        self.y = y

    def learn(self, i: int) -> None:
        raise NotImplementedError

    def prior(self, i: int) -> float:
        raise NotImplementedError

    def learn_and_predict(self, i: int) -> float:
        p = self.prior(i)
        self.learn(i)
        return p


def _dict_rows(X: np.ndarray) -> list[dict[int, float]]:
    # river takes dicts; the conversion is done once, outside the timing (in river's favour)
    return [dict(enumerate(r.tolist())) for r in X]


class RiverPA(Peer):
    """river's PARegressor, PA-I. Its loss maps y to 2y - 1 (a classification mapping) while
    its step uses sign(y - y_hat): not the paper's update, so predictions differ."""

    name = "river PARegressor (mode=1)"

    def __init__(self, X, y, *, C: float, eps: float) -> None:
        from river.linear_model import PARegressor

        super().__init__(X, y)
        self.rows = _dict_rows(X)
        self.model = PARegressor(C=C, mode=1, eps=eps, learn_intercept=False)

    def learn(self, i: int) -> None:
        self.model.learn_one(self.rows[i], self.y[i])

    def prior(self, i: int) -> float:
        return float(self.model.predict_one(self.rows[i]))


class RiverBLR(Peer):
    """river's BayesianLinearRegression. Its prior precision is I / alpha and smoothing s
    updates S <- s S + (1 - s) beta x x^T, so with beta = 1 and alpha = 1 / (lam (1 - s))
    its posterior mean is the forgetting-factor RLS estimate with gamma = s and ridge lam:
    its prediction is our RLS a-priori prediction mu_t. Without smoothing, alpha = 1 / lam
    gives plain ridge RLS (mu_t of VAW)."""

    same = True

    def __init__(self, X, y, *, lam: float, smoothing: float | None) -> None:
        from river.linear_model import BayesianLinearRegression

        super().__init__(X, y)
        self.rows = _dict_rows(X)
        alpha = 1.0 / lam if smoothing is None else 1.0 / (lam * (1.0 - smoothing))
        self.model = BayesianLinearRegression(alpha=alpha, beta=1.0, smoothing=smoothing)
        self.name = "river BayesianLinearRegression" + (
            f" (smoothing={smoothing})" if smoothing is not None else ""
        )

    def learn(self, i: int) -> None:
        self.model.learn_one(self.rows[i], self.y[i])

    def prior(self, i: int) -> float:
        return float(self.model.predict_one(self.rows[i]))


class RiverEWA(Peer):
    """river's EWARegressor over K BayesianLinearRegression(smoothing=gamma_i): the same
    experts as dvaw-ensemble's matrix experts, but a different meta algorithm (no clipping,
    no fixed share, no gamma = 0 expert), so only the timing is compared."""

    def __init__(self, X, y, *, lam: float, gammas: np.ndarray) -> None:
        from river.ensemble import EWARegressor
        from river.linear_model import BayesianLinearRegression

        super().__init__(X, y)
        self.rows = _dict_rows(X)
        experts = [
            BayesianLinearRegression(alpha=1.0 / (lam * (1.0 - g)), beta=1.0, smoothing=float(g))
            for g in gammas
        ]
        self.model = EWARegressor(experts)
        self.name = f"river EWARegressor over K={len(experts)} BLR(smoothing)"

    def learn(self, i: int) -> None:
        self.model.learn_one(self.rows[i], self.y[i])

    def prior(self, i: int) -> float:
        return float(self.model.predict_one(self.rows[i]))


class SklearnSGD(Peer):
    """scikit-learn SGDRegressor / SGDClassifier, ``partial_fit`` one row at a time."""

    def __init__(self, X, y, *, classifier: bool, same: bool = False, **kwargs: Any) -> None:
        from sklearn.linear_model import SGDClassifier, SGDRegressor

        super().__init__(X, y)
        self.classifier = classifier
        self.same = same
        if classifier:
            # labels -1/+1 (our classifiers accept 0/1 too); unlabelled rows are skipped
            self.labels = [None if v is None else (1 if float(v) > 0 else -1) for v in y]
            self.est = SGDClassifier(**kwargs)
        else:
            self.labels = [float(v) for v in y]
            self.est = SGDRegressor(**kwargs)
        what = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k in ("loss", "learning_rate"))
        self.name = f"sklearn {type(self.est).__name__}.partial_fit ({what})"
        self.rows = [X[i : i + 1] for i in range(len(X))]

    def learn(self, i: int) -> None:
        label = self.labels[i]
        if label is None:
            return
        if self.classifier:
            self.est.partial_fit(self.rows[i], [label], classes=[-1, 1])
        else:
            self.est.partial_fit(self.rows[i], [label])

    def prior(self, i: int) -> float:
        if not hasattr(self.est, "coef_"):
            return 0.0
        return float(self.X[i] @ np.ravel(self.est.coef_) + np.ravel(self.est.intercept_)[0])


def sgd_regressor_generic(X, y) -> SklearnSGD:
    return SklearnSGD(X, y, classifier=False, loss="squared_error", learning_rate="invscaling")


def sgd_classifier_generic(X, y) -> SklearnSGD:
    return SklearnSGD(X, y, classifier=True, loss="hinge", learning_rate="optimal")


class NaivePA1(Peer):
    """PA-I regression in plain numpy, no validation and no report: the framework's overhead."""

    name = "naive numpy PA-I"
    same = True

    def __init__(self, X, y, *, C: float, eps: float) -> None:
        super().__init__(X, y)
        self.C, self.eps = C, eps
        self.w = np.zeros(X.shape[1])

    def learn_and_predict(self, i: int) -> float:
        x, y = self.X[i], self.y[i]
        p = float(self.w @ x)
        e = p - y
        tau = pa_step_size(abs(e), self.eps, float(x @ x), "pa1", self.C)
        if tau > 0.0:
            self.w -= np.sign(e) * tau * x
        return p

    learn = learn_and_predict  # type: ignore[assignment]


class NaiveDiscountedVAW(Peer):
    """Discounted VAW by a full solve per event (O(d^3)): Sigma_t = gamma Sigma + x x^T,
    w_t = Sigma_t^{-1} (gamma theta_t) (hint 0), predict x.w_t, theta <- gamma theta + y x.
    gamma = 1 is classic VAW (Eq. 1)."""

    same = True

    def __init__(self, X, y, *, gamma: float, lam: float) -> None:
        super().__init__(X, y)
        d = X.shape[1]
        self.g = gamma
        self.A = lam * np.eye(d)
        self.theta = np.zeros(d)
        self.name = "naive numpy VAW (solve per event)" + (
            f", gamma={gamma}" if gamma != 1.0 else ""
        )

    def learn_and_predict(self, i: int) -> float:
        x, y = self.X[i], self.y[i]
        self.A = self.g * self.A + np.outer(x, x)
        w = np.linalg.solve(self.A, self.g * self.theta)
        p = float(x @ w)
        self.theta = self.g * self.theta + y * x
        return p

    learn = learn_and_predict  # type: ignore[assignment]


class CvxpyPAS(Peer):
    """PAS (APAS with a fixed threshold) whose prox (5) is a CVXPY problem: parametrised
    once (DPP), re-solved with Clarabel every event. The side information is the default
    log return h_t(w) = -log(1 + x_t.w) over the simplex."""

    name = "CVXPY prox (DPP, Clarabel) + PA step"
    same = True

    def __init__(self, X, y, *, lam: float, eps: float) -> None:
        import cvxpy as cp

        super().__init__(X, y)
        d = X.shape[1]
        self.cp = cp
        self.eps = eps
        self.w = np.full(d, 1.0 / d)  # Pi_simplex(0)
        self.xp = cp.Parameter(d)
        self.wh = cp.Parameter(d)
        self.var = cp.Variable(d)
        obj = -cp.log(1 + self.xp @ self.var) + cp.sum_squares(self.var - self.wh) / (2 * lam)
        self.prob = cp.Problem(cp.Minimize(obj), [cp.sum(self.var) == 1, self.var >= 0])

    def learn_and_predict(self, i: int) -> float:
        x, y = self.X[i], self.y[i]
        p = float(self.w @ x)
        e = p - y
        tau = pa_step_size(abs(e), self.eps, float(x @ x), "pa", 1.0)
        w_hat = self.w - np.sign(e) * tau * x if tau > 0.0 else self.w
        self.xp.value, self.wh.value = x, w_hat
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.prob.solve(solver=self.cp.CLARABEL)
        if self.var.value is not None:
            self.w = np.asarray(self.var.value, dtype=np.float64)
        return p

    learn = learn_and_predict  # type: ignore[assignment]
