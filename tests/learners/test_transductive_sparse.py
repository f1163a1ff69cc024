"""docs/algorithms/transductive.md: the sparse Student-t transductive prior (Algorithm B)."""

from __future__ import annotations

import numpy as np

from learners.transductive.offline.closed_form import forward_predictions
from learners.transductive.offline.sparse_approximations import (
    importance_predict,
    laplace_predict,
)
from learners.transductive.regressor import TransductiveRegressor
from learners.transductive.sparse_prior import column_scales, gibbs_predict, sample_prior

D = 4
SCALES = np.array([1.0, 1.0, 1e2, 10.0])


def fixture(T: int = 60, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, D)) * SCALES
    y = np.clip(rng.normal(size=T), -1.0, 1.0)
    return X, y


def test_item8_frozen_omega_equals_closed_form_vaw() -> None:
    X, y = fixture()
    Y, eta = 1.0, 0.5
    tau_j = column_scales(X, 0.5)
    omega0 = np.random.default_rng(8).uniform(0.5, 2.0, size=D)
    Lam = np.diag(3.0 / (omega0 * tau_j**2)) / (2 * eta)
    ref = forward_predictions(X, y, Lam)
    rng = np.random.default_rng(0)
    G, b = np.zeros((D, D)), np.zeros(D)
    for t, (x, v) in enumerate(zip(X, y, strict=True)):
        G += np.outer(x, x)
        got, omega, _ = gibbs_predict(x, G, b, tau_j, omega0, rng, Y=Y, freeze=True)
        assert abs(got - ref[t]) <= 1e-10
        assert np.array_equal(omega, omega0)
        b += v * x


def test_item9_flat_prior_limit() -> None:
    X, y = fixture()
    Y = 1.0
    tau_j = column_scales(X, 1e8)
    rng = np.random.default_rng(9)
    for t in (D, 10, 30, 59):  # t >= d: G_t invertible
        x = X[t]
        G = X[: t + 1].T @ X[: t + 1]
        b = X[:t].T @ y[:t]
        flat = float(x @ np.linalg.solve(G, b))
        assert abs(laplace_predict(x, G, b, tau_j, Y) - flat) <= 1e-6 * abs(flat)
        assert abs(importance_predict(x, G, b, tau_j, Y, rng) - flat) <= 1e-6 * abs(flat)
        gibbs, _, se = gibbs_predict(x, G, b, tau_j, np.ones(D), rng, Y=Y)
        # 3 Monte Carlo standard errors (plus rounding: se can be ~1e-16 here)
        assert abs(gibbs - flat) <= 3 * se + 1e-12 * abs(flat)


def test_item10_odd_symmetry_within_monte_carlo_error() -> None:
    X, y = fixture(T=30)
    tau_j = column_scales(X, 0.5)
    for t in (3, 12, 29):
        x = X[t]
        G = X[: t + 1].T @ X[: t + 1]
        b = X[:t].T @ y[:t]
        plus, minus = [], []
        for rep in range(20):
            plus.append(
                gibbs_predict(x, G, b, tau_j, np.ones(D), np.random.default_rng(rep), Y=1.0)[0]
            )
            minus.append(
                gibbs_predict(x, G, -b, tau_j, np.ones(D), np.random.default_rng(100 + rep), Y=1.0)[
                    0
                ]
            )
        s = np.array(plus) + np.array(minus)
        se = np.std(s, ddof=1) / np.sqrt(len(s))
        assert abs(float(np.mean(s))) <= 3 * se + 1e-12


def test_item11_student_prior_variance() -> None:
    tau_j = np.array([0.1, 1.0, 30.0])
    draws = sample_prior(tau_j, 1_000_000, np.random.default_rng(11))
    var = np.mean(draws**2, axis=0)  # the prior mean is 0
    assert np.all(np.abs(var / tau_j**2 - 1.0) <= 0.05)


def test_no_data_prediction_is_zero_and_learner_matches_sampler() -> None:
    X, y = fixture(T=20)
    tau_j = column_scales(X, 0.5)
    rng = np.random.default_rng(1)
    y0, _, _ = gibbs_predict(X[0], np.outer(X[0], X[0]), np.zeros(D), tau_j, np.ones(D), rng, Y=1.0)
    assert y0 == 0.0  # b = 0: mu_f = 0 in every sweep
    model = TransductiveRegressor(D, mode="sparse", tau=0.5, seed=5)
    model.register(X)
    assert np.allclose(model.tau_j_, tau_j, rtol=1e-12)
    tau_j = model.tau_j_  # the block is stored sorted: column norms differ in the last bit
    rng = np.random.default_rng(5)
    omega, G, b = np.ones(D), np.zeros((D, D)), np.zeros(D)
    for x, v in zip(X, y, strict=True):
        G += np.outer(x, x)
        ref, omega, _ = gibbs_predict(x, G, b, tau_j, omega, rng, Y=1.0)
        assert model.learn(x, v).prediction == ref
        b += v * x


def test_item18_mala_on_the_gaussian_posterior_of_algorithm_a() -> None:
    from learners.transductive.mala import batch_means_stderr, mala

    X, y = fixture(T=60)
    Y, eta, t = 1.0, 0.5, 40
    lam = D / len(X)
    A = lam * (X.T @ X) + X[: t + 1].T @ X[: t + 1]  # nu_t: G_t includes x_t (§2.2)
    b = X[:t].T @ y[:t]
    x = X[t]
    # column-normalised coordinates phi = D theta (spec §4.4)
    Dn = np.sqrt(np.sum(X**2, axis=0))
    Aphi = A / np.outer(Dn, Dn)
    bphi = b / Dn

    def log_density(phi: np.ndarray) -> tuple[float, np.ndarray]:
        # log nu = -eta (theta^T A theta - 2 b^T theta), theta = phi / D
        return float(-eta * (phi @ Aphi @ phi - 2 * bphi @ phi)), -eta * (2 * Aphi @ phi - 2 * bphi)

    L = 2 * eta * float(np.max(np.linalg.eigvalsh(Aphi)))
    rng = np.random.default_rng(18)
    phi, acc, _ = mala(log_density, np.zeros(D), rng, step=1 / L, burn_in=2000, n=40_000)
    f = (phi / Dn) @ x
    mu_f = float(x @ np.linalg.solve(A, b))
    s2_f = float(x @ np.linalg.solve(2 * eta * A, x))
    assert 0.4 <= acc <= 0.8
    for sign in (1.0, -1.0):
        values = np.exp(sign * f / Y)
        exact = np.exp(sign * mu_f / Y + s2_f / (2 * Y * Y))
        assert abs(values.mean() - exact) <= 4 * batch_means_stderr(values)
