"""Property tests of the transductive VAW / ridge (``docs/algorithms/transductive.md``),
plus the service-facing block flow. The sparse prior, logistic and hinge tests live in
``test_transductive_sparse.py`` and ``test_transductive_slab.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners.base import Learner
from learners.codec import decode_state, encode_state
from learners.transductive.offline.closed_form import (
    forward_predictions,
    hindsight_loss,
    o2b_predict,
    theorem1_bound,
    transductive_regulariser,
)
from learners.transductive.regressor import TransductiveRegressor

D, T = 4, 400
SCALES = np.array([1.0, 1.0, 1e2, 10.0])


def fixture(seed: int = 3, T: int = T) -> tuple[np.ndarray, np.ndarray]:
    """Spec §12 default fixture: x ~ N(0, diag(scales)^2), y ~ clip(N(0,1), -1, 1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, D)) * SCALES
    y = np.clip(rng.normal(size=T), -1.0, 1.0)
    return X, y


def run(X: np.ndarray, y: np.ndarray, **params: object) -> np.ndarray:
    model = TransductiveRegressor(X.shape[1], **params)  # type: ignore[arg-type]
    model.register(X)
    return np.array([model.learn(x, v).prediction for x, v in zip(X, y, strict=True)])


def e2_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = np.array([1e-4, 1e-2, 1.0, 1e2, 1e4])
    Z = rng.normal(size=(2000, 5))
    w = rng.normal(size=5) / np.sqrt(5)
    eps = rng.normal(size=2000)
    return Z * c, np.clip(Z @ w + 0.5 * eps, -1.0, 1.0)


def test_matches_reference_forward_forecaster() -> None:
    X, y = fixture()
    lam = D / T
    ref = forward_predictions(X, y, transductive_regulariser(X, lam))
    got = run(X, y)
    assert np.max(np.abs(got - ref)) <= 1e-9 * np.max(np.abs(ref))
    ref_ridge = forward_predictions(X, y, transductive_regulariser(X, lam), ridge=True)
    got_ridge = run(X, y, mode="ridge")
    assert np.max(np.abs(got_ridge - ref_ridge)) <= 1e-9 * np.max(np.abs(ref_ridge))


# ---- item 1: closed form = EW + Vovk substitution ------------------------------------------
def _logmeanexp(a: np.ndarray, w: np.ndarray) -> float:
    m = float(np.max(a))
    return m + math.log(float(np.sum(w * np.exp(a - m))) / float(np.sum(w)))


def test_item1_closed_form_equals_substitution_by_quadrature() -> None:
    rng = np.random.default_rng(3)
    Tn, Y = 30, 1.0
    eta = 1.0 / (2 * Y * Y)
    x = 5.0 * rng.normal(size=Tn)
    y = np.clip(rng.normal(size=Tn), -Y, Y)
    lam = 1.0 / Tn
    closed = run(x[:, None], y)
    GT = float(x @ x)
    worst = 0.0
    for t in range(Tn):
        prec = lam * GT + float(x[:t] @ x[:t])  # posterior N(mu, (2 eta prec)^-1), §3.1
        mu = float(x[:t] @ y[:t]) / prec
        sd = 1.0 / math.sqrt(2 * eta * prec)
        theta = np.linspace(mu - 12 * sd, mu + 12 * sd, 200_001)
        logw = -0.5 * ((theta - mu) / sd) ** 2
        w = np.exp(logw)
        w[[0, -1]] *= 0.5  # trapezoid
        f = theta * x[t]
        plus = _logmeanexp(-eta * (Y - f) ** 2, w)
        minus = _logmeanexp(-eta * (-Y - f) ** 2, w)
        y_quad = (Y / 2) * (plus - minus)  # Vovk substitution, §2.2
        worst = max(worst, abs(y_quad - closed[t]))
    assert worst <= 1e-10


def test_item1_gaussian_expectation_formula_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    Y, eta, mu, s = 1.0, 0.5, 0.3, 0.7
    f = mu + s * rng.normal(size=4_000_000)
    mc = float(np.mean(np.exp(-eta * (Y - f) ** 2)))
    k = 1 + 2 * eta * s * s
    exact = k**-0.5 * math.exp(-eta * (Y - mu) ** 2 / k)
    assert abs(mc - exact) <= 5e-3 * exact


# ---- item 2: exact identity ----------------------------------------------------------------
def test_item2_exact_identity() -> None:
    X, y = fixture()
    Lam = transductive_regulariser(X, D / T)
    pred = run(X, y)
    A = Lam.copy()
    h = np.empty(T)
    s = np.empty(T)
    for t in range(T):
        s[t] = X[t] @ np.linalg.solve(A, X[t])  # x^T A_{t-1}^-1 x
        A += np.outer(X[t], X[t])
        h[t] = X[t] @ np.linalg.solve(A, X[t])  # leverage x^T A_t^-1 x
    theta = np.linalg.solve(X.T @ X + Lam, X.T @ y)
    penalised = np.sum((y - X @ theta) ** 2) + theta @ Lam @ theta
    lhs = float(np.sum((y - pred) ** 2))
    rhs = float(penalised + np.sum(h * y * y) - np.sum(s * pred * pred))
    assert abs(lhs - rhs) <= 1e-9 * lhs


# ---- item 3: regret bound ------------------------------------------------------------------
def _check_bound(X: np.ndarray, y: np.ndarray, Y: float = 1.0) -> None:
    Tn, d = X.shape
    lam = d / Tn
    best = hindsight_loss(X, y)
    sy2 = float(y @ y)
    for params, ridge in (
        ({}, False),
        ({"clip": True, "Y": Y}, False),
        ({"clip": True, "Y": Y, "mode": "ridge"}, True),
    ):
        pred = run(X, y, **params)
        regret = float(np.sum((y - pred) ** 2)) - best
        assert regret <= theorem1_bound(lam, sy2, d, Y, ridge=ridge) + 1e-9, params


def test_item3_regret_bound_random_sequences() -> None:
    for seed in range(50):
        X, y = fixture(seed=100 + seed)
        _check_bound(X, y)


def test_item3_regret_bound_adversarial_scales() -> None:
    Tn = 1000
    for lam_vaw in (1e-4, 1e-2, 1.0, 1e2):  # E1
        X = np.full((Tn, 1), math.sqrt(lam_vaw / Tn))
        _check_bound(X, np.ones(Tn))
    X, y = e2_data(0)
    _check_bound(X, y)


# ---- item 4: design reparametrisation invariance ------------------------------------------
def test_item4_reparametrisation_invariance() -> None:
    X, y = fixture()
    rng = np.random.default_rng(4)
    A = rng.normal(size=(D, D)) + 3 * np.eye(D)
    p1, p2 = run(X, y), run(X @ A.T, y)
    assert np.max(np.abs(p1 - p2)) <= 1e-10 * np.max(np.abs(p1))
    # counter-test: isotropic VAW is not invariant
    q1 = forward_predictions(X, y, np.eye(D))
    q2 = forward_predictions(X @ A.T, y, np.eye(D))
    assert np.max(np.abs(q1 - q2)) > 1e-3


# ---- item 5: order-independence of the prior -----------------------------------------------
def test_item5_registration_state_is_order_independent() -> None:
    X, y = fixture()
    a, b = TransductiveRegressor(D), TransductiveRegressor(D)
    a.register(X)
    b.register(X[np.random.default_rng(5).permutation(T)])
    sa, sb = a.state(), b.state()
    for key in ("block_", "W_", "M_", "lam_"):
        assert np.allclose(sa[key], sb[key], rtol=1e-10, atol=0.0), key
    GT = X.T @ X
    # W^T W = G_T^-1: the prior N(0, (Y^2/lam) G_T^-1) of eq. (6)
    assert np.allclose(a.W_.T @ a.W_ @ GT, np.eye(D), atol=1e-10)
    # predictions then depend only on the realised order of the labelled prefix
    pa = [a.learn(x, v).prediction for x, v in zip(X, y, strict=True)]
    pb = [b.learn(x, v).prediction for x, v in zip(X, y, strict=True)]
    assert np.allclose(pa, pb, rtol=1e-10, atol=1e-12)


# ---- item 6: Y-independence ----------------------------------------------------------------
def test_item6_unclipped_predictions_do_not_depend_on_Y() -> None:
    X, y = fixture()
    assert np.array_equal(run(X, y, Y=1.0), run(X, y, Y=100.0))


# ---- item 7: Proposition 7 instance (E1) ---------------------------------------------------
def test_item7_proposition7_instance() -> None:
    Tn = 1000
    exact_vaw = sum(((Tn + 1) / (Tn + t)) ** 2 for t in range(1, Tn + 1))
    exact_tr = 4 * sum(k**-2 for k in range(2, Tn + 2))
    for lam_vaw in (1e-4, 1e-2, 1.0, 1e2):
        X = np.full((Tn, 1), math.sqrt(lam_vaw / Tn))
        y = np.ones(Tn)
        vaw = forward_predictions(X, y, lam_vaw * np.eye(1))
        r_vaw = float(np.sum((y - vaw) ** 2))  # the comparator has zero loss
        r_tr = float(np.sum((y - run(X, y, lam=1.0 / Tn)) ** 2))
        assert r_vaw >= Tn / 4
        assert r_tr <= 2.6
        assert abs(r_vaw - exact_vaw) <= 1e-6 * exact_vaw
        assert abs(r_tr - exact_tr) <= 1e-6 * exact_tr


# ---- item 10 (Algorithm A): odd symmetry ---------------------------------------------------
def test_item10_odd_symmetry_exact() -> None:
    X, y = fixture()
    for mode in ("vaw", "ridge"):
        assert np.array_equal(run(X, -y, mode=mode), -run(X, y, mode=mode))


# ---- item 20: online-to-batch --------------------------------------------------------------
def test_item20_o2b_equals_naive_average() -> None:
    X, y = fixture(T=60)
    X_train, y_train, x = X[:-1], y[:-1], X[-1]
    n = len(y_train)
    lam = D / (n + 1)
    G = X_train.T @ X_train + np.outer(x, x)
    naive = []
    for t in range(n + 1):  # x placed at position t+1, after labels 1..t
        A = lam * G + X_train[:t].T @ X_train[:t] + np.outer(x, x)
        naive.append(x @ np.linalg.solve(A, X_train[:t].T @ y_train[:t]))
    assert abs(o2b_predict(X_train, y_train, x) - float(np.mean(naive))) <= 1e-10


# ---- §14 service flow -----------------------------------------------------------------------
def test_register_summary_and_bad_blocks() -> None:
    X, _ = fixture(T=20)
    model = TransductiveRegressor(D)
    summary = model.register(np.vstack([X, X[:3]]))
    assert summary["T"] == 23 and summary["d_eff"] == D and summary["distinct"] == 20
    assert summary["lam"] == pytest.approx(D / 23)
    before = model.state()
    bad = [
        np.zeros((3, D + 1)),
        np.zeros(D),
        np.zeros((0, D)),
        np.vstack([X, [[np.nan] * D]]),
        [["a"] * D],
        np.zeros((TransductiveRegressor.max_block + 1, D)),
    ]
    for vectors in bad:
        with pytest.raises(ValueError, match="transductive"):
            model.register(vectors)
    for k, v in before.items():
        assert (
            np.array_equal(v, model.state()[k])
            if isinstance(v, np.ndarray)
            else v == (model.state()[k])
        )


def test_vectors_outside_the_block_and_multiplicity() -> None:
    X, y = fixture(T=10)
    model = TransductiveRegressor(D)
    with pytest.raises(ValueError, match="register"):
        model.predict(X[0])
    model.register(np.vstack([X, X[:1]]))  # X[0] twice
    model.learn(X[0], y[0])
    model.learn(X[0], y[0])
    with pytest.raises(ValueError, match="not in the registered block"):
        model.learn(X[0], y[0])
    with pytest.raises(ValueError, match="not in the registered block"):
        model.predict(X[0] + 1e-12)
    assert model.block_remaining == 9


def test_fallback_answers_outside_the_block_without_touching_the_prior() -> None:
    X, y = fixture(T=50)
    model = TransductiveRegressor(D, fallback="vaw")
    rep = model.learn(X[0], y[0])  # no block yet: the fallback answers
    assert rep.diagnostics["transductive"] == 0.0
    model.register(X[1:])
    M0 = model.M_.copy()
    outside = np.ones(D)
    ref = forward_predictions(np.vstack([X[:1], outside]), [y[0], 0.0], np.eye(D))
    assert model.predict(outside).value == pytest.approx(ref[1], rel=1e-12)
    model.learn(outside, 0.3)
    assert np.array_equal(model.M_, M0) and model.block_t_ == 0
    rep = model.learn(X[1], y[1])
    assert rep.diagnostics["transductive"] == 1.0 and model.unregistered_ == 2


def test_new_block_starts_fresh_and_state_roundtrip() -> None:
    X, y = fixture(T=80)
    model = TransductiveRegressor(D, clip=True)
    model.register(X[:40])
    for x, v in zip(X[:25], y[:25], strict=True):
        model.learn(x, v)
    clone = Learner.from_state(decode_state(encode_state(model.state())))
    assert isinstance(clone, TransductiveRegressor)
    for x, v in zip(X[25:40], y[25:40], strict=True):
        assert model.learn(x, v).prediction == clone.learn(x, v).prediction
    summary = model.register(X[40:])
    assert summary["previous_remaining"] == 0 and model.block_t_ == 0
    fresh = run(X[40:], y[40:], clip=True)
    got = [model.learn(x, v).prediction for x, v in zip(X[40:], y[40:], strict=True)]
    assert np.array_equal(got, fresh)


def test_periodic_refactor_keeps_predictions(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = fixture()
    plain = run(X, y)
    monkeypatch.setattr(TransductiveRegressor, "refresh_every", 7)
    refreshed = run(X, y)
    assert np.max(np.abs(plain - refreshed)) <= 1e-10 * np.max(np.abs(plain))


def test_rank_deficient_block_projects_onto_the_span() -> None:
    rng = np.random.default_rng(7)
    B = rng.normal(size=(60, 2))
    X = np.column_stack([B[:, 0], B[:, 1], B[:, 0] + B[:, 1], np.zeros(60)])
    y = np.clip(B @ [0.5, -0.3] + 0.1 * rng.normal(size=60), -1, 1)
    model = TransductiveRegressor(4)
    assert model.register(X)["d_eff"] == 2
    pred = np.array([model.learn(x, v).prediction for x, v in zip(X, y, strict=True)])
    # same forecaster on the 2 independent coordinates (a reparametrisation of the span)
    assert np.allclose(pred, run(B, y, lam=4 / 60), rtol=1e-9, atol=1e-12)


def test_labels_above_Y_are_counted_and_clipped_for_the_update() -> None:
    X, y = fixture(T=30)
    y = 3.0 * y
    model = TransductiveRegressor(D, clip=True, Y=1.0)
    model.register(X)
    for x, v in zip(X, y, strict=True):
        model.learn(x, v)
    assert model.label_clipped_ == int(np.sum(np.abs(y) > 1.0))
    ref = forward_predictions(X, y, transductive_regulariser(X, D / 30), clip=1.0, clip_labels=True)
    model2 = TransductiveRegressor(D, clip=True)
    model2.register(X)
    got = [model2.learn(x, v).prediction for x, v in zip(X, y, strict=True)]
    assert np.allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_block_size_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TransductiveRegressor, "max_block_cells", 10)
    model = TransductiveRegressor(D)
    with pytest.raises(ValueError, match="at most 10 numbers"):
        model.register(np.ones((3, D)))
    assert model.register(np.ones((2, D)))["T"] == 2
