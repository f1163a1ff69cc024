"""The binary-classifier base and the baselines: CW (variance), SOP, perceptron, PA/PA-I/PA-II."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from learners import build
from learners._classifier import FULL_MAX_DIM, BinaryClassifier, sign_label, to_pm1
from learners.checks import assert_states_equal
from learners.cw import CWClassifier, cw_variance_step
from learners.pa_classifier import PAClassifier
from learners.perceptron import Perceptron
from learners.sop import SecondOrderPerceptron

BINARY_KINDS = [
    ("arow", {}),
    ("arow", {"diagonal": "cov"}),
    ("arow", {"diagonal": "prec"}),
    ("cw", {}),
    ("cw", {"diagonal": True}),
    ("sop", {}),
    ("sop", {"diagonal": True}),
    ("perceptron", {}),
    ("pa-classifier", {"variant": "pa"}),
    ("pa-classifier", {"variant": "pa1", "C": 0.1}),
    ("pa-classifier", {"variant": "pa2"}),
]
IDS = [f"{k}{p}" for k, p in BINARY_KINDS]


def stream(T: int = 600, d: int = 5, seed: int = 0, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, d)) * rng.uniform(0.2, 3.0, size=d)
    w = rng.normal(size=d)
    y = np.where(X @ w >= 0.0, 1, -1)
    flip = rng.random(T) < noise
    y[flip] = -y[flip]
    return X, y, w


# ---- label mapping ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("label", "expected"),
    [(1, 1.0), (-1, -1.0), (0, -1.0), (1.0, 1.0), (-1.0, -1.0), (0.0, -1.0), (True, 1.0),
     (False, -1.0), (np.int64(1), 1.0), (np.float32(-1.0), -1.0), (np.bool_(False), -1.0)],
)  # fmt: skip
def test_to_pm1_accepts_and_maps(label: object, expected: float) -> None:
    assert to_pm1(label) == expected


@pytest.mark.parametrize("label", [2, -2, 0.5, "1", "pos", None, float("nan"), [1], 1j])
def test_to_pm1_rejects(label: object) -> None:
    with pytest.raises(ValueError):
        to_pm1(label)


def test_sign_label_tie_is_positive() -> None:
    assert sign_label(0.0) == 1 and sign_label(-0.0) == 1 and sign_label(-1e-300) == -1


@pytest.mark.parametrize(("kind", "params"), BINARY_KINDS, ids=IDS)
def test_zero_one_and_boolean_labels_equal_pm1(kind: str, params: dict) -> None:
    X, y, _ = stream(T=300)
    ref, zo, bo = (build(kind, 5, **params) for _ in range(3))
    assert isinstance(ref, BinaryClassifier) and ref.task == "classification"
    ref.learn_many(X, y)
    zo.learn_many(X, [int(v > 0) for v in y])
    bo.learn_many(X, [bool(v > 0) for v in y])
    for other in (zo, bo):
        assert_states_equal(ref.state(), other.state())


@pytest.mark.parametrize(("kind", "params"), BINARY_KINDS, ids=IDS)
def test_report_prediction_scores_and_counters(kind: str, params: dict) -> None:
    X, y, _ = stream(T=400)
    model = build(kind, 5, **params)
    mistakes = updates = 0
    for x, yt in zip(X, y, strict=True):
        p = model.predict(x)
        m = p.scores["margin"]
        assert p.value == (1 if m >= 0 else -1)
        rep = model.learn(x, yt)
        d = rep.diagnostics
        assert rep.prediction == p.value and rep.scores == {"margin": m}
        assert rep.loss == float(p.value != yt)
        assert d["score"] == m and d["margin"] == yt * m
        assert d["hinge"] == max(0.0, 1.0 - yt * m) and d["mistake"] == float(yt * m <= 0)
        mistakes += yt * m <= 0
        updates += d["update"] > 0
    assert (model.t_, model.n_mistakes_, model.n_updates_) == (400, mistakes, updates)
    scores = model.decision_function(X[:50])
    single = np.array([model.predict(x).scores["margin"] for x in X[:50]])
    assert np.max(np.abs(scores - single)) <= 1e-12 * max(1.0, np.max(np.abs(single)))
    with pytest.raises(ValueError):
        model.decision_function(X[:3, :4])


@pytest.mark.parametrize(("kind", "params"), BINARY_KINDS, ids=IDS)
def test_learns_a_noiseless_separable_stream(kind: str, params: dict) -> None:
    X, y, w = stream(T=2000, noise=0.0)
    model = build(kind, 5, **params)
    model.learn_many(X, y)
    rng = np.random.default_rng(9)
    Xt = rng.normal(size=(2000, 5)) * np.std(X, axis=0)
    err = np.mean(np.where(model.decision_function(Xt) >= 0, 1, -1) != np.where(Xt @ w >= 0, 1, -1))
    assert err < 0.2  # chance is 0.5


def test_full_covariance_dimension_guard() -> None:
    for kind, params in [("arow", {}), ("cw", {}), ("sop", {}), ("arow-regression", {})]:
        with pytest.raises(ValueError, match="dim"):
            build(kind, FULL_MAX_DIM + 1, **params)
    assert build("arow", FULL_MAX_DIM + 1, diagonal=True).Sigma_.shape == (FULL_MAX_DIM + 1,)
    assert build("cw", FULL_MAX_DIM + 1, diagonal=True).dim == FULL_MAX_DIM + 1


# ---- perceptron ---------------------------------------------------------------------------
def test_perceptron_update_rule_and_novikoff_bound() -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(size=4)
    w /= np.linalg.norm(w)
    X = rng.normal(size=(5000, 4))
    keep = np.abs(X @ w) >= 0.2  # margin gamma = 0.2
    X = X[keep]
    y = np.where(X @ w >= 0, 1, -1)
    model = Perceptron(4)
    expected = np.zeros(4)
    for x, yt in zip(X, y, strict=True):
        if yt * (expected @ x) <= 0:
            expected = expected + yt * x
        model.learn(x, yt)
        assert np.array_equal(model.w_, expected)
    R = np.max(np.linalg.norm(X, axis=1))
    assert model.n_mistakes_ <= (R / 0.2) ** 2


# ---- PA / PA-I / PA-II --------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["pa", "pa1", "pa2"])
def test_pa_steps(variant: str) -> None:
    X, y, _ = stream(T=800)
    C = 0.05
    model = PAClassifier(5, variant=variant, C=C)
    for x, yt in zip(X, y, strict=True):
        m = model.w_ @ x
        loss, sq = max(0.0, 1.0 - yt * m), x @ x
        rep = model.learn(x, yt)
        tau = rep.diagnostics["tau"]
        after = 1.0 - yt * (model.w_ @ x)
        if loss == 0.0:
            assert tau == 0.0
        elif variant == "pa":
            assert abs(after) <= 1e-9 * max(1.0, loss)  # the hard constraint is met exactly
        elif variant == "pa1":
            assert tau == min(C, loss / sq)
            assert after >= -1e-12
        else:
            assert abs(tau - loss / (sq + 1.0 / (2.0 * C))) <= 1e-15 * max(1.0, tau)
            # PA-II leaves slack loss * (1/2C) / (||x||^2 + 1/2C)
            slack = loss * (1.0 / (2.0 * C)) / (sq + 1.0 / (2.0 * C))
            assert abs(after - slack) <= 1e-9 * max(1.0, loss)


# ---- CW (variance form, §2.1) -------------------------------------------------------------
def test_cw_step_is_the_quadratic_root() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        phi = NormalDist().inv_cdf(rng.uniform(0.51, 0.99))
        V = 10.0 ** rng.uniform(-4, 3)
        M = rng.normal() * 10.0 ** rng.uniform(-3, 2)
        alpha = cw_variance_step(M, V, phi)
        if M >= phi * V:
            assert alpha == 0.0
            continue
        naive = (
            -(1 + 2 * phi * M) + math.sqrt((1 + 2 * phi * M) ** 2 - 8 * phi * (M - phi * V))
        ) / (4 * phi * V)
        assert alpha > 0.0
        assert abs(alpha - naive) <= 1e-8 * max(abs(naive), 1e-300) + 1e-12
        # tight constraint: y mu_t.x = M + alpha V equals phi V / (1 + 2 alpha phi V)
        lhs, rhs = M + alpha * V, phi * V / (1.0 + 2.0 * alpha * phi * V)
        assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(M), phi * V)


def test_cw_full_update_makes_the_constraint_tight() -> None:
    X, y, _ = stream(T=1500)
    model = CWClassifier(5, eta=0.8)
    phi = NormalDist().inv_cdf(0.8)
    n_updates = 0
    for x, yt in zip(X, y, strict=True):
        S0 = model.Sigma_.copy()
        M, V = yt * (model.mu_ @ x), x @ S0 @ x
        rep = model.learn(x, yt)
        S = model.Sigma_
        assert np.max(np.abs(S - S.T)) <= 1e-12 * np.max(np.abs(S))
        assert np.linalg.eigvalsh(S).min() > 0.0
        if M >= phi * V:
            assert rep.diagnostics["update"] == 0.0 and np.array_equal(S, S0)
        else:
            n_updates += 1
            lhs, rhs = yt * (model.mu_ @ x), phi * (x @ S @ x)
            assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs))
            # precision form: Sigma_t^{-1} = Sigma^{-1} + 2 alpha phi x x'
            a = rep.diagnostics["alpha"]
            P = np.linalg.inv(S0) + 2.0 * a * phi * np.outer(x, x)
            assert np.max(np.abs(np.linalg.inv(S) - P)) <= 1e-8 * (1.0 + np.max(np.abs(P)))
    assert n_updates > 0


def test_cw_diagonal_precision_update() -> None:
    X, y, _ = stream(T=500)
    model = CWClassifier(5, eta=0.9, diagonal=True)
    phi = NormalDist().inv_cdf(0.9)
    for x, yt in zip(X, y, strict=True):
        s0 = model.Sigma_.copy()
        a = model.learn(x, yt).diagnostics["alpha"]
        expected = 1.0 / (1.0 / s0 + 2.0 * a * phi * x * x)
        assert np.max(np.abs(model.Sigma_ - expected)) <= 1e-12 * np.max(s0)
        assert np.all(model.Sigma_ > 0.0) and np.all(model.Sigma_ <= s0)


# ---- SOP ----------------------------------------------------------------------------------
@pytest.mark.parametrize("diagonal", [False, True])
def test_sop_matches_the_direct_formula(diagonal: bool) -> None:
    X, y, _ = stream(T=700)
    a = 0.5
    model = SecondOrderPerceptron(5, a=a, diagonal=diagonal)
    S, v = a * np.eye(5), np.zeros(5)
    for x, yt in zip(X, y, strict=True):
        if diagonal:
            expected = float(np.sum(v * x / (np.diag(S) + x * x)))
        else:
            expected = float(v @ np.linalg.solve(S + np.outer(x, x), x))
        got = model.predict(x).scores["margin"]
        assert abs(got - expected) <= 1e-9 * max(1.0, abs(expected))
        rep = model.learn(x, yt)
        if yt * got <= 0:  # only mistakes update: S += x x' (its diagonal), v += y x
            assert rep.diagnostics["update"] == 1.0
            S = S + (np.diag(x * x) if diagonal else np.outer(x, x))
            v = v + yt * x
        else:
            assert rep.diagnostics["update"] == 0.0
    assert model.n_updates_ == model.n_mistakes_


def test_sop_diagonal_equals_full_on_one_hot_inputs() -> None:
    rng = np.random.default_rng(0)
    X = np.zeros((400, 6))
    X[np.arange(400), rng.integers(0, 6, size=400)] = rng.normal(0.0, 2.0, size=400)
    y = rng.choice([-1, 1], size=400)
    full, diag = SecondOrderPerceptron(6, a=0.3), SecondOrderPerceptron(6, a=0.3, diagonal=True)
    for x, yt in zip(X, y, strict=True):
        rf, rd = full.learn(x, yt), diag.learn(x, yt)
        assert abs(rf.diagnostics["score"] - rd.diagnostics["score"]) <= 1e-12
    assert np.max(np.abs(full.weights - diag.weights)) <= 1e-12
