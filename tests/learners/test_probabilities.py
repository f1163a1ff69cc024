"""Class probabilities (docs/probabilities.md): every classifier kind, AROW's Gaussian
formula, the online probit calibration's update and its checkpoint compatibility."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learners import REGISTRY
from learners._classifier import ProbitCalibrated, gaussian_argmax_proba, gaussian_proba_plus
from learners.arow import AROW
from learners.checks import DIM, assert_states_equal

CLASSIFIERS = [
    (kind, i, params)
    for kind, cls in sorted(REGISTRY.items())
    if cls.task == "classification"
    for i, params in enumerate(cls._test_params())
]
CALIBRATED = sorted(k for k, c in REGISTRY.items() if issubclass(c, ProbitCalibrated))
_PHI = NormalDist().cdf


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    case=st.sampled_from(CLASSIFIERS),
    seed=st.integers(0, 2**16),
    n=st.integers(0, 60),
    scale=st.sampled_from([1e-6, 1.0, 1e3, 1e6]),
)
def test_probabilities_sum_to_one_and_lie_in_the_unit_interval(case, seed, n, scale) -> None:  # type: ignore[no-untyped-def]
    """Any kind, any history length, inputs from tiny to huge: one probability per class
    (the labels predict answers), each in [0, 1], summing to 1."""
    kind, _, params = case
    cls = REGISTRY[kind]
    X, y = cls._test_stream(DIM, n + 5, seed)
    X = X * scale
    learner = cls(DIM, **params)
    learner._test_prepare(X)
    learner.learn_many(X[:n], y[:n])
    for x, proba in zip(X[n:], learner.predict_proba_many(X[n:]), strict=True):
        assert learner.predict(x).value in proba
        assert all(0.0 <= p <= 1.0 for p in proba.values()), proba
        assert math.isclose(sum(proba.values()), 1.0, abs_tol=1e-12), proba


@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_arow_probability_is_the_calibrated_gaussian_probit_of_its_score(diagonal) -> None:  # type: ignore[no-untyped-def]
    """z = mu.x / sqrt(1 + x' Sigma x) (from the dense covariance here), then
    p(+1) = Phi((a z + b) / sqrt(1 + (z, 1) V (z, 1)')) with the calibration's (a, b), V;
    with a = 1, b = 0, V = 0 it is the pure Gaussian Phi(mu.x / sqrt(1 + x' Sigma x))."""
    X, y = AROW._test_stream(DIM, 80, 4)
    model = AROW(DIM, diagonal=diagonal, r=0.5)
    model.learn_many(X[:60], y[:60])
    a, b = model.calib_a_, model.calib_b_
    V = np.array([[model.calib_vaa_, model.calib_vab_], [model.calib_vab_, model.calib_vbb_]])
    assert (a, b) != (1.0, 0.0)  # the calibration learned from the 60 labels
    pure = AROW.from_state(
        {**model.state(), "calib_a_": 1.0, "calib_b_": 0.0}
        | {"calib_vaa_": 0.0, "calib_vab_": 0.0, "calib_vbb_": 0.0}
    )
    for x in X[60:]:
        m = float(np.dot(model.weights, x))
        z = m / math.sqrt(1.0 + float(x @ model.covariance @ x))
        u = np.array([z, 1.0])
        expected = _PHI((a * z + b) / math.sqrt(1.0 + u @ V @ u))
        proba = model.predict_proba(x)
        assert proba[1] == pytest.approx(expected, rel=1e-12, abs=1e-15)
        assert proba[-1] == pytest.approx(1.0 - expected, rel=1e-12, abs=1e-15)
        assert pure.predict_proba(x)[1] == pytest.approx(_PHI(z), rel=1e-12, abs=1e-15)


def test_multiclass_arow_two_classes_match_the_binary_formula() -> None:
    """Two independent class scores N(m_k, v_k + 1/2): the quadrature gives the closed form."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        m, v = rng.normal(size=2) * 3, rng.exponential(size=2)
        p = gaussian_argmax_proba(m, v)
        assert p[1] == pytest.approx(gaussian_proba_plus(m[1] - m[0], v[0] + v[1]), abs=1e-10)


def test_multiclass_probabilities_match_monte_carlo() -> None:
    rng = np.random.default_rng(1)
    m, v = np.array([0.5, -0.2, 1.0, 0.1]), np.array([0.3, 2.0, 0.1, 1.0])
    draws = m + rng.normal(size=(200_000, 4)) * np.sqrt(v + 0.5)
    freq = np.bincount(np.argmax(draws, axis=1), minlength=4) / draws.shape[0]
    np.testing.assert_allclose(gaussian_argmax_proba(m, v), freq, atol=4e-3)


def test_multiclass_arow_keys_are_its_classes() -> None:
    model = AROW(3, classes=["a", "b", "c"])
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3))
    labels = ["a", "b", "c"]
    model.learn_many(X, [labels[int(np.argmax(x))] for x in X])
    proba = model.predict_proba([3.0, 0.0, 0.0])
    assert list(proba) == labels and max(proba, key=proba.__getitem__) == "a"


def test_probit_calibration_update_is_the_posterior_moment_match() -> None:
    """One ADF step equals the mean and covariance of prior(a, b) x Phi(y (a m + b)),
    integrated on a grid."""
    model = REGISTRY["perceptron"](DIM)
    model.calib_a_, model.calib_b_ = 0.7, -0.2
    model.calib_vaa_, model.calib_vab_, model.calib_vbb_ = 0.8, 0.3, 0.5
    mean = np.array([0.7, -0.2])
    cov = np.array([[0.8, 0.3], [0.3, 0.5]])
    m, y = 2.5, -1.0
    model._calibrate(y, m, {})
    L = np.linalg.cholesky(cov)
    g = np.linspace(-9, 9, 801)
    u = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    theta = mean + u @ L.T
    prior = np.exp(-0.5 * np.sum(u * u, axis=1))
    lik = np.array([_PHI(y * (a * m + b)) for a, b in theta])
    w = prior * lik
    w /= w.sum()
    post_mean = w @ theta
    d = theta - post_mean
    post_cov = (d * w[:, None]).T @ d
    got_mean = [model.calib_a_, model.calib_b_]
    got_cov = [[model.calib_vaa_, model.calib_vab_], [model.calib_vab_, model.calib_vbb_]]
    np.testing.assert_allclose(got_mean, post_mean, atol=1e-6)
    np.testing.assert_allclose(got_cov, post_cov, atol=1e-6)


@pytest.mark.parametrize("kind", CALIBRATED)
def test_calibration_learns_from_labels_and_is_in_the_state(kind) -> None:  # type: ignore[no-untyped-def]
    cls = REGISTRY[kind]
    X, y = cls._test_stream(DIM, 300, 5)
    model = cls(DIM)
    prior_state = model.state()
    model.learn_many(X, y)
    state = model.state()
    assert state["calib_vaa_"] < prior_state["calib_vaa_"]  # type: ignore[operator]
    clone = cls.from_state(state)
    assert_states_equal(state, clone.state())
    assert clone.predict_proba_many(X) == model.predict_proba_many(X)


@pytest.mark.parametrize("kind", CALIBRATED)
def test_a_checkpoint_without_calibration_fields_loads_with_the_prior(kind) -> None:  # type: ignore[no-untyped-def]
    cls = REGISTRY[kind]
    X, y = cls._test_stream(DIM, 100, 6)
    model = cls(DIM)
    model.learn_many(X, y)
    old = {k: v for k, v in model.state().items() if not k.startswith("calib_")}
    restored = cls.from_state(old)
    assert restored.predict(X[0]) == model.predict(X[0])
    m = restored.predict(X[0]).scores["margin"]  # type: ignore[index]
    z = restored._calibration_input(X[0], m)  # type: ignore[attr-defined]
    assert restored.predict_proba(X[0])[1] == pytest.approx(_PHI(z / math.sqrt(2.0 + z * z)))
    restored.learn_many(X, y)  # and it keeps learning


@pytest.mark.parametrize(
    ("kind", "params"),
    [(k, p) for k in CALIBRATED for p in REGISTRY[k]._test_params()]
    + [("arow", {"classes": ["a", "b", "c"]})],
)
def test_inputs_at_the_service_bound_give_valid_probabilities_and_a_finite_calibration(  # type: ignore[no-untyped-def]
    kind, params
) -> None:
    """x up to 1e150 (the service's value bound) overflows some scores and variances: the
    probabilities stay valid (1/2 where a score is NaN) and the calibration finite."""
    cls = REGISTRY[kind]
    X, y = cls._test_stream(DIM, 40, 7)
    classes = params.get("classes")
    labels = [classes[i % len(classes)] for i in range(40)] if classes else y
    model = cls(DIM, **params)
    with np.errstate(all="ignore"):
        model.learn_many(X[:30] * 1e150, labels[:30])
        probas = model.predict_proba_many(X[30:] * 1e150)
    for proba in probas:
        assert all(0.0 <= p <= 1.0 for p in proba.values()), proba
        assert math.isclose(sum(proba.values()), 1.0, abs_tol=1e-12), proba
    for name, value in model.state().items():
        if name.startswith("calib_"):
            assert math.isfinite(value), (name, value)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["nemsis", "scan"])
def test_quantifier_probabilities_follow_each_labelled_event(kind) -> None:  # type: ignore[no-untyped-def]
    """The window's Platt fit is kept between predictions, never past a change of the
    window: after each event, the same answer as a learner rebuilt from the state."""
    cls = REGISTRY[kind]
    params = cls._test_params()[0]
    X, y = cls._test_stream(DIM, 120, 8)
    model = cls(DIM, **params)
    model.learn_many(X[:60], y[:60])
    for x, v in zip(X[60:80], y[60:80], strict=True):
        model.predict_proba_many(X[100:])
        model.learn(x, v)
        fresh = cls.from_state(model.state())
        assert model.predict_proba_many(X[100:]) == fresh.predict_proba_many(X[100:])
