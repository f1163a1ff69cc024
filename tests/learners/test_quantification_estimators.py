"""CC / ACC / PCC / PACC (``docs/algorithms/nemsis.md``) against QuaPy, and the quantifiers'
API: labels, unlabelled events, prevalence windows, ``quantify``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from learners import REGISTRY, build
from learners import quantification as Q
from learners.quantification import estimators as E
from learners.quantification.nemsis import NEMSIS
from learners.quantification.scan import SCAN

D = 4


def _scores(seed: int, n: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < p, 1, 0)
    return rng.normal(size=n) + 1.5 * y - 0.8, y


def _fixed_classifier():  # type: ignore[no-untyped-def]
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Fixed(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):  # type: ignore[no-untyped-def]
            return self

    f = Fixed()
    f.classes_ = np.array([0, 1])
    return f


def test_estimators_match_quapy() -> None:
    pytest.importorskip("quapy")
    from quapy.method.aggregative import ACC, CC, PACC, PCC

    for seed in range(10):
        sv, yv = _scores(seed, 600, 0.3)
        st, _ = _scores(100 + seed, 400, [0.1, 0.5, 0.8][seed % 3])
        cal = E.Calibration.fit(sv, yv)
        sig = 1 / (1 + np.exp(-(cal.a * st + cal.b)))
        sig_v = 1 / (1 + np.exp(-(cal.a * sv + cal.b)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc = CC(_fixed_classifier(), fit_classifier=False)
            acc = ACC(
                _fixed_classifier(),
                fit_classifier=False,
                method="inversion",
                norm="clip",
                solver="exact-cc",
            )
            acc.aggregation_fit((sv > 0).astype(int), yv)
            pcc = PCC(_fixed_classifier(), fit_classifier=False)
            pacc = PACC(
                _fixed_classifier(),
                fit_classifier=False,
                method="inversion",
                norm="clip",
                solver="exact-cc",
            )
            pacc.aggregation_fit(np.c_[1 - sig_v, sig_v], yv)
        assert cal.tpr - cal.fpr >= E.MIN_DENOMINATOR
        assert E.cc(st) == pytest.approx(cc.aggregate((st > 0).astype(int))[1], abs=1e-12)
        assert cal.estimate(st, "acc") == pytest.approx(
            acc.aggregate((st > 0).astype(int))[1], abs=1e-9
        )
        assert cal.estimate(st, "pcc") == pytest.approx(
            pcc.aggregate(np.c_[1 - sig, sig])[1], abs=1e-12
        )
        assert cal.estimate(st, "pacc") == pytest.approx(
            pacc.aggregate(np.c_[1 - sig, sig])[1], abs=1e-9
        )


def test_acc_falls_back_to_cc_on_a_weak_classifier() -> None:
    st = np.array([1.0, -1.0, 2.0, -0.5])
    assert E.acc(st, tpr=0.52, fpr=0.5) == E.cc(st) == 0.5
    assert E.acc(st, tpr=0.9, fpr=0.1) == pytest.approx((0.5 - 0.1) / 0.8)
    assert E.acc(np.ones(3), tpr=0.6, fpr=0.1) == 1.0  # clipped
    assert E.cc(np.array([0.0, 0.0])) == 0.0  # ties are negative


def test_platt_fit_minimises_its_objective() -> None:
    s, y = _scores(3, 500, 0.4)
    a, b = E.platt_fit(s, y)
    n_pos, n_neg = int(y.sum()), int((1 - y).sum())
    t = np.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def loss(v: np.ndarray) -> float:
        z = v[0] * s + v[1]
        return float(np.sum(np.logaddexp(0, z) - t * z))

    ref = minimize(loss, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    assert (a, b) == pytest.approx(tuple(ref), abs=1e-5)
    with pytest.raises(ValueError):
        E.platt_fit(s, np.ones_like(y))


def test_unknown_method_raises() -> None:
    cal = E.Calibration.fit(*_scores(0, 100, 0.5))
    with pytest.raises(ValueError, match="method"):
        cal.estimate(np.zeros(3), "emq")
    with pytest.raises(ValueError):
        E.cc(np.array([]))


# ---- the learners' API -------------------------------------------------------------------
def _gauss(seed: int, n: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < p, 1, -1)
    return rng.normal(size=(n, D)) + (1.0 * y)[:, None] * np.array([1.0, 0, 0, 0]), y


@pytest.mark.parametrize("kind", ["nemsis", "scan"])
def test_registered_as_classifiers_with_the_issue_hyperparameters(kind: str) -> None:
    cls = REGISTRY[kind]
    assert cls.task == "classification"
    names = set(cls.param_names())
    assert {"measure", "ns", "eta0", "radius"} <= names
    if kind == "nemsis":
        assert {"C", "beta"} <= names
        assert NEMSIS(D).measure == "q" and NEMSIS(D).ns is True
    else:
        assert {"s0", "growth", "level_ratio", "level_min"} <= names
    with pytest.raises(ValueError, match="measure"):
        build(kind, D, measure="kld")


@pytest.mark.parametrize("make", [lambda: NEMSIS(D, window=50), lambda: SCAN(D, s0=50)])
def test_labels_unlabelled_events_and_windows(make) -> None:  # type: ignore[no-untyped-def]
    X, y = _gauss(0, 400, 0.3)
    a, b = make(), make()
    for x, v in zip(X[:200], y[:200], strict=True):
        ra = a.learn(x, int(v))
        rb = b.learn(x, bool(v > 0) if v > 0 else 0)  # booleans and 0/1 map to +-1
        assert ra.prediction == rb.prediction and ra.prediction in (-1, 1)
        assert ra.loss == float(ra.prediction != v)
    assert np.array_equal(a.w_, b.w_)
    before = a.state()
    w_before = a.w_.copy()
    scores = []
    for x in X[200:260]:
        rep = a.learn(x, None)
        assert rep.loss == 0.0 and rep.diagnostics["labelled"] == 0.0
        scores.append(rep.scores["margin"])
    assert np.array_equal(a.w_, w_before) and a.t_ == before["t_"]
    n = a.window
    assert a.window_prevalence("cc") == pytest.approx(np.mean(np.array(scores[-n:]) > 0))
    assert rep.diagnostics["prevalence_cc"] == pytest.approx(a.window_prevalence("cc"))
    for method in E.METHODS:
        v = a.quantify(X[260:], method=method)
        assert 0.0 <= v <= 1.0
        assert 0.0 <= a.window_prevalence(method) <= 1.0
    assert a.quantify(X[260:], "cc") == E.cc(a.decision_function(X[260:]))
    cal = a.calibration()
    assert cal is not None
    assert a.quantify(X[260:]) == cal.estimate(a.decision_function(X[260:]), "pacc")
    assert a.window_prevalence() == a.window_prevalence("pacc")
    pred = a.predict(X[0])
    assert pred.value in (-1, 1) and set(pred.scores) == {"margin"}
    with pytest.raises(ValueError, match="method"):
        a.quantify(X[:3], method="bogus")
    with pytest.raises(ValueError):
        a.quantify(np.zeros((2, D + 1)))
    with pytest.raises(ValueError):
        a.learn(X[0], 2)


def test_quantifier_without_labels_falls_back_to_cc() -> None:
    m = NEMSIS(D)
    X, _ = _gauss(1, 20, 0.5)
    assert m.calibration() is None
    assert m.quantify(X, "pacc") == m.quantify(X, "cc")
    assert np.isnan(m.window_prevalence())


def _shifted(rng: np.random.Generator, n: int, p: float, u: np.ndarray):  # type: ignore[no-untyped-def]
    y = np.where(rng.random(n) < p, 1, -1)
    return rng.normal(size=(n, D)) + 0.75 * y[:, None] * u, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_defaults_beat_the_paper_configuration_under_prevalence_shift(seed: int) -> None:
    """The defaults (Q_1 + PACC, chosen in benchmarks/README.md) against the paper's
    NegKLD + CC, trained at prevalence 0.3 and tested at 0.05, 0.5 and 0.9: NegKLD's CC
    stays near the training prior, the defaults follow the shift."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    X, y = _shifted(rng, 3000, 0.3, u)
    ours, paper = NEMSIS(D), NEMSIS(D, measure=Q.PAPER_MEASURE)
    for m in (ours, paper):
        m.learn_many(X, [int(v) for v in y])
    err_ours, err_paper = [], []
    for p in (0.05, 0.5, 0.9):
        Xt, yt = _shifted(rng, 2000, p, u)
        truth = float(np.mean(yt > 0))
        err_ours.append(abs(ours.quantify(Xt) - truth))
        err_paper.append(abs(paper.quantify(Xt, method=Q.PAPER_METHOD) - truth))
    assert np.mean(err_ours) < 0.08, err_ours
    assert np.mean(err_ours) < 0.5 * np.mean(err_paper), (err_ours, err_paper)
