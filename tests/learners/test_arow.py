"""AROW property tests: every item of ``docs/algorithms/arow.md``, with its tolerances."""

from __future__ import annotations

import numpy as np
import pytest

from learners import decode_state, encode_state
from learners.arow import AROW, AROWRegressor, shrink_covariance
from learners.pa_classifier import PAClassifier

R_VALUES = (0.01, 0.1, 1.0, 10.0)
SCALES = np.array([1.0, 2.0, 0.5, 3.0, 1.0, 0.1])


def dense_data(T: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§14 fixture: d = 6, column scales (1, 2, 0.5, 3, 1, 0.1), separator labels, 10% flipped."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, 6)) * SCALES
    w = rng.normal(size=6)
    y = np.where(X @ w >= 0.0, 1.0, -1.0)
    flip = rng.random(T) < 0.1
    y[flip] = -y[flip]
    return X, y, w


def run_trace(model: AROW, X: np.ndarray, y: np.ndarray) -> list[dict]:
    """Learn every row, recording the pre-update quantities and the post-update state."""
    out = []
    for x, yt in zip(X, y, strict=True):
        mu0, S0 = model.mu_.copy(), model.Sigma_.copy()
        rep = model.learn(x, yt)
        out.append(
            {
                "x": x,
                "y": yt,
                "m": rep.diagnostics["score"],
                "v": rep.diagnostics["variance"],
                "update": rep.diagnostics["update"] > 0,
                "mu0": mu0,
                "S0": S0,
                "mu": model.mu_.copy(),
                "S": model.Sigma_.copy(),
            }
        )
    return out


@pytest.fixture(scope="module", params=R_VALUES, ids=lambda r: f"r={r}")
def full_trace(request: pytest.FixtureRequest) -> tuple[float, list[dict]]:
    X, y, _ = dense_data()
    r = request.param
    return r, run_trace(AROW(6, r=r), X, y)


# ---- 1. passivity ------------------------------------------------------------------------
def test_passive_when_margin_at_least_one(full_trace: tuple[float, list[dict]]) -> None:
    _, trace = full_trace
    passive = [s for s in trace if s["y"] * s["m"] >= 1.0]
    assert passive, "the fixture must contain passive rounds"
    for s in passive:
        assert not s["update"]
        assert np.array_equal(s["mu"], s["mu0"]) and np.array_equal(s["S"], s["S0"])


@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_margin_exactly_one_is_passive(diagonal: bool | str) -> None:
    model = AROW(3, r=0.5, diagonal=diagonal)
    model.mu_ = np.array([0.5, 0.25, 0.0])
    x = np.array([1.0, 2.0, 7.0])  # mu . x == 1.0 exactly
    assert model.mu_ @ x == 1.0
    before = model.state()
    rep = model.learn(x, 1)
    assert rep.diagnostics["update"] == 0.0
    assert np.array_equal(model.mu_, before["mu_"])
    assert np.array_equal(model.Sigma_, before["Sigma_"])


# ---- 2., 3. post-update margin and variance -----------------------------------------------
def test_post_update_margin_identity(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    for s in (s for s in trace if s["update"]):
        y, m, v, x = s["y"], s["m"], s["v"], s["x"]
        after = 1.0 - y * (s["mu"] @ x)
        assert abs(after - (1.0 - y * m) * r / (v + r)) <= 1e-9 * max(1.0, abs(1.0 - y * m))
        assert y * (s["mu"] @ x) <= 1.0 + 1e-12


def test_variance_shrinks_in_direction_x(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    for s in (s for s in trace if s["update"]):
        v, x = s["v"], s["x"]
        assert abs(x @ s["S"] @ x - v * r / (v + r)) <= 1e-9 * max(1.0, v)


# ---- 4. SPD, symmetry, monotone -----------------------------------------------------------
def test_sigma_spd_symmetric_and_monotone(full_trace: tuple[float, list[dict]]) -> None:
    _, trace = full_trace
    for s in trace:
        S = s["S"]
        assert np.max(np.abs(S - S.T)) <= 1e-12 * np.max(np.abs(S))
        assert np.linalg.eigvalsh(S).min() > 0.0
        assert np.linalg.eigvalsh(s["S0"] - S).min() >= -1e-10


# ---- 5., 6. closed forms ------------------------------------------------------------------
def _update_set(trace: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    XA = sum(np.outer(s["x"], s["x"]) for s in trace if s["update"])
    b = sum(s["y"] * s["x"] for s in trace if s["update"])
    return np.asarray(XA), np.asarray(b)


def test_precision_closed_form(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    XA, _ = _update_set(trace)
    err = np.max(np.abs(np.linalg.inv(trace[-1]["S"]) - (np.eye(6) + XA / r)))
    assert err <= 1e-8 * (1.0 + np.max(np.abs(XA)) / r)


def test_mean_is_ridge_on_update_set(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    XA, b = _update_set(trace)
    mu = trace[-1]["mu"]
    assert np.max(np.abs(mu - np.linalg.solve(r * np.eye(6) + XA, b))) <= 1e-10 * (
        1.0 + np.max(np.abs(mu))
    )


# ---- 7. Lemma 3 ---------------------------------------------------------------------------
def test_lemma3_identities(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    u = np.random.default_rng(1).normal(size=6)
    for s in (s for s in trace if s["update"]):
        y, m, v, x = s["y"], s["m"], s["v"], s["x"]
        p_new = np.linalg.solve(s["S"], s["mu"])  # Sigma_t^{-1} mu_t
        p_old = np.linalg.solve(s["S0"], s["mu0"])
        lhs1, rhs1 = u @ p_new, u @ p_old + y * (u @ x) / r
        assert abs(lhs1 - rhs1) <= 1e-9 * max(1.0, abs(lhs1))
        loss = max(0.0, 1.0 - y * m)
        lhs2 = s["mu"] @ p_new
        rhs2 = s["mu0"] @ p_old + (v + r - loss**2 * r) / (r * (v + r))
        assert abs(lhs2 - rhs2) <= 1e-9 * max(1.0, abs(lhs2))


# ---- 8. Theorem 2 -------------------------------------------------------------------------
def test_mistake_bound(full_trace: tuple[float, list[dict]]) -> None:
    r, trace = full_trace
    _, _, w = dense_data()
    M = sum(1 for s in trace if s["y"] * s["m"] <= 0.0)
    U = sum(1 for s in trace if 0.0 < s["y"] * s["m"] < 1.0)
    assert M + U == sum(1 for s in trace if s["update"])
    XA, _ = _update_set(trace)
    logdet = np.linalg.slogdet(np.eye(6) + XA / r)[1]
    us = [c * w / np.linalg.norm(w) for c in (0.5, 1.0, 2.0, 5.0)]
    us.append(np.random.default_rng(2).normal(size=6))
    for u in us:
        g = sum(max(0.0, 1.0 - s["y"] * (u @ s["x"])) for s in trace if s["update"])
        bound = np.sqrt(r * u @ u + u @ XA @ u) * np.sqrt(logdet + U) + g - U
        assert M <= bound + 1e-9


# ---- 9., 10. limits of r ------------------------------------------------------------------
def test_large_r_is_hebbian() -> None:
    X, y, _ = dense_data()
    model = AROW(6, r=1e8)
    reports = model.learn_many(X, y)
    assert sum(rep.diagnostics["update"] for rep in reports) == len(X)  # M + U = T
    hebb = (y[:, None] * X).sum(axis=0)
    cos = model.mu_ @ hebb / (np.linalg.norm(model.mu_) * np.linalg.norm(hebb))
    assert cos >= 1.0 - 1e-6


def test_small_r_is_hard_margin() -> None:
    """§14.10. The margin part holds while each update direction is new (v_t >> r); once
    Sigma has saturated in every direction (v_t ~ r) the post-update margin deficiency is
    (1 - y m) r / (v + r), no longer small, so on the d = 6 fixture it is checked on the
    first d updates, and on every update of a stream with fresh directions (d > T)."""
    X, y, _ = dense_data()
    X = X / np.linalg.norm(X, axis=1, keepdims=True)  # ||x|| = 1
    updates = [s for s in run_trace(AROW(6, r=1e-10), X, y) if s["update"]]
    assert len(updates) > 6
    for s in updates:
        assert s["x"] @ s["S"] @ s["x"] <= 1e-9  # confidence saturates in direction x_t
    for s in updates[:6]:
        assert s["y"] * (s["mu"] @ s["x"]) >= 1.0 - 1e-6
    rng = np.random.default_rng(0)
    Xf = rng.normal(size=(50, 60))
    Xf /= np.linalg.norm(Xf, axis=1, keepdims=True)
    yf = rng.choice([-1.0, 1.0], size=50)
    fresh = [s for s in run_trace(AROW(60, r=1e-10), Xf, yf) if s["update"]]
    assert len(fresh) >= 25
    for s in fresh:
        assert s["y"] * (s["mu"] @ s["x"]) >= 1.0 - 1e-6
        assert s["x"] @ s["S"] @ s["x"] <= 1e-9


# ---- 11. PA-II reduction ------------------------------------------------------------------
@pytest.mark.parametrize("r", R_VALUES)
def test_frozen_covariance_is_pa2(r: float) -> None:
    X, y, _ = dense_data()
    arow = AROW(6, r=r, update_covariance=False)
    pa = PAClassifier(6, variant="pa2", C=1.0 / (2.0 * r))
    for x, yt in zip(X, y, strict=True):
        arow.learn(x, yt)
        pa.learn(x, yt)
        assert np.max(np.abs(arow.mu_ - pa.w_)) <= 1e-12
    assert np.array_equal(arow.Sigma_, np.eye(6))


# ---- 12., 13., 14. diagonal modes ---------------------------------------------------------
def test_one_hot_diagonal_modes_equal_full() -> None:
    rng = np.random.default_rng(0)
    d, T = 8, 500
    X = np.zeros((T, d))
    X[np.arange(T), rng.integers(0, d, size=T)] = rng.normal(0.0, 3.0, size=T)
    y = rng.choice([-1, 1], size=T)
    full = AROW(d, r=0.7)
    cov = AROW(d, r=0.7, diagonal="cov")
    prec = AROW(d, r=0.7, diagonal="prec")
    for x, yt in zip(X, y, strict=True):
        for model in (full, cov, prec):
            model.learn(x, yt)
        for diag in (cov, prec):
            assert np.max(np.abs(diag.mu_ - full.mu_)) <= 1e-12
            assert np.max(np.abs(diag.Sigma_ - np.diag(full.Sigma_))) <= 1e-12
    off = full.Sigma_ - np.diag(np.diag(full.Sigma_))
    assert np.all(off == 0.0)


def test_single_step_mode_ordering() -> None:
    rng = np.random.default_rng(0)
    r = 0.3
    for trial in range(200):
        s = rng.uniform(0.01, 2.0, size=7)
        x = rng.normal(size=7) * rng.uniform(0.1, 5.0, size=7)
        if trial % 4 == 0:  # nnz(x) = 1: the two modes agree
            keep = rng.integers(0, 7)
            x[np.arange(7) != keep] = 0.0
        sx = s * x
        v = float(x @ sx)
        s_cov = shrink_covariance(s, x, sx, v, r, "cov")
        s_prec = shrink_covariance(s, x, sx, v, r, "prec")
        assert np.all(s_cov >= s_prec - 1e-15)
        if np.count_nonzero(x) == 1:
            assert np.max(np.abs(s_cov - s_prec)) <= 1e-15


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["cov", "prec"])
def test_diagonal_positivity_under_stress(mode: str) -> None:
    rng = np.random.default_rng(0)
    d, T = 10, 100_000
    X = rng.uniform(-1.0, 1.0, size=(T, d)) * 10.0 ** rng.uniform(0.0, 6.0, size=(T, d))
    X[rng.random((T, d)) < 0.7] = 0.0  # sparse rows
    X[:d] = 1e6 * np.eye(d)  # q_j = s_j x_j^2 = 1e12 >> r: naive s - beta (s x)^2 rounds to 0
    y = rng.choice([-1, 1], size=T)
    model = AROW(d, r=1e-6, diagonal=mode)
    model.learn_many(X, y)
    assert np.all(model.Sigma_ > 0.0) and np.all(np.isfinite(model.Sigma_))
    assert np.all(np.isfinite(model.mu_))


# ---- 15., 16., 17. symmetries and the zero vector -----------------------------------------
@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_label_sign_symmetry_is_bit_exact(diagonal: bool | str) -> None:
    X, y, _ = dense_data(T=1000)
    a, b = AROW(6, r=0.1, diagonal=diagonal), AROW(6, r=0.1, diagonal=diagonal)
    a.learn_many(X, y)
    b.learn_many(-X, -y)
    assert np.array_equal(a.mu_, b.mu_) and np.array_equal(a.Sigma_, b.Sigma_)


@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_permutation_equivariance(diagonal: bool | str) -> None:
    X, y, _ = dense_data(T=1000)
    perm = np.random.default_rng(3).permutation(6)
    a, b = AROW(6, r=0.1, diagonal=diagonal), AROW(6, r=0.1, diagonal=diagonal)
    a.learn_many(X, y)
    b.learn_many(X[:, perm], y)
    assert np.max(np.abs(b.mu_ - a.mu_[perm])) <= 1e-12
    if diagonal is False:
        assert np.max(np.abs(b.Sigma_ - a.Sigma_[np.ix_(perm, perm)])) <= 1e-12
    else:
        assert np.max(np.abs(b.Sigma_ - a.Sigma_[perm])) <= 1e-12


@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_zero_vector(diagonal: bool | str) -> None:
    X, y, _ = dense_data(T=50)
    model = AROW(6, r=1.0, diagonal=diagonal)
    model.learn_many(X, y)
    mu, S, mistakes = model.mu_.copy(), model.Sigma_.copy(), model.n_mistakes_
    assert model.predict(np.zeros(6)).value == 1
    for label in (1, -1):
        rep = model.learn(np.zeros(6), label)
        assert rep.prediction == 1
        assert rep.diagnostics["mistake"] == 1.0
    assert model.n_mistakes_ == mistakes + 2
    assert np.array_equal(model.mu_, mu) and np.array_equal(model.Sigma_, S)


# ---- 18. regression = ridge ---------------------------------------------------------------
@pytest.mark.parametrize("r", [0.1, 1.0, 10.0])
def test_regression_is_online_ridge(r: float) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 6)) * SCALES
    yv = X @ rng.normal(size=6) + 0.3 * rng.normal(size=500)
    model = AROWRegressor(6, r=r)
    A, b = r * np.eye(6), np.zeros(6)
    for x, yt in zip(X, yv, strict=True):
        pred = model.predict(x).value  # with mu_{t-1}: ridge before x_t is added
        assert abs(pred - np.linalg.solve(A, b) @ x) <= 1e-9 * max(1.0, abs(pred))
        model.learn(x, yt)
        A += np.outer(x, x)
        b += yt * x
        assert np.max(np.abs(model.mu_ - np.linalg.solve(A, b))) <= 1e-9


# ---- 19. multi-class margin identity ------------------------------------------------------
@pytest.mark.parametrize("diagonal", [False, "cov", "prec"])
def test_multiclass_margin_identity(diagonal: bool | str) -> None:
    rng = np.random.default_rng(0)
    K, d, T, r = 4, 5, 1500, 0.5
    W = rng.normal(size=(K, d))
    X = rng.normal(size=(T, d))
    labels = np.argmax(X @ W.T + 0.5 * rng.normal(size=(T, K)), axis=1)
    classes = ["a", "b", "c", "d"]
    model = AROW(d, r=r, diagonal=diagonal, classes=classes)
    n_passive = 0
    for x, k in zip(X, labels, strict=True):
        mu0, S0 = model.mu_.copy(), model.Sigma_.copy()
        rep = model.learn(x, classes[k])
        m, v = rep.diagnostics["margin"], rep.diagnostics["variance"]
        s = model.mu_ @ x
        if m >= 1.0:
            n_passive += 1
            assert rep.diagnostics["update"] == 0.0
            assert np.array_equal(model.mu_, mu0) and np.array_equal(model.Sigma_, S0)
        else:
            # the post-update margin against the same competitor c
            c = int(np.argmax(np.where(np.arange(K) == k, -np.inf, mu0 @ x)))
            m_new = s[k] - s[c]
            assert abs((1.0 - m_new) - (1.0 - m) * r / (v + r)) <= 1e-9 * max(1.0, abs(1.0 - m))
            assert m_new <= 1.0 + 1e-12
    assert n_passive > 0


def test_multiclass_predicts_labels_and_learns() -> None:
    rng = np.random.default_rng(0)
    centers = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
    labels = rng.integers(0, 3, size=1500)
    X = np.hstack([centers[labels] + rng.normal(size=(1500, 2)), np.ones((1500, 1))])
    model = AROW(3, r=1.0, classes=[10, 20, 30])
    model.learn_many(X[:1000], [10 * (k + 1) for k in labels[:1000]])
    pred = [model.predict(x).value for x in X[1000:]]
    assert set(pred) <= {10, 20, 30}
    accuracy = np.mean(np.array(pred) == 10 * (labels[1000:] + 1))
    assert accuracy > 0.95
    p = model.predict(X[0])
    assert set(p.scores) == {"10", "20", "30"}
    assert p.value == [10, 20, 30][int(np.argmax([p.scores[k] for k in ("10", "20", "30")]))]
    for bad in (0, 15, "10", True, float("nan"), None, 10.5):
        with pytest.raises(ValueError):
            model.learn(X[0], bad)
    assert model.learn(X[0], 20.0).prediction in (10, 20, 30)  # 20.0 is the int class 20


# ---- 20. serialization round-trip ---------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [{}, {"diagonal": "cov"}, {"diagonal": "prec"}, {"classes": ["x", "y", "z"]}],
    ids=["full", "cov", "prec", "multiclass"],
)
def test_serialization_roundtrip_continues_bit_identically(params: dict) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1300, 6)) * SCALES
    if "classes" in params:
        y = [("x", "y", "z")[k] for k in np.argmax(X[:, :3], axis=1)]
    else:
        y = list(np.where(X @ rng.normal(size=6) >= 0.0, 1, -1))
    model = AROW(6, r=0.3, **params)
    model.learn_many(X[:300], y[:300])
    blob = encode_state(model.state())
    clone = AROW.from_state(decode_state(blob))
    for x, yt in zip(X[300:], y[300:], strict=True):
        pa, pb = model.predict(x), clone.predict(x)
        assert pa == pb
        ra, rb = model.learn(x, yt), clone.learn(x, yt)
        assert ra.prediction == rb.prediction and ra.diagnostics == rb.diagnostics
    assert np.array_equal(model.mu_, clone.mu_) and np.array_equal(model.Sigma_, clone.Sigma_)
    assert model.state()["mu_"].tobytes() == clone.state()["mu_"].tobytes()
