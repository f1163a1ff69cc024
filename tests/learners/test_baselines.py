"""Baselines of the drift benchmark (docs/algorithms/dvaw.md): ``rls`` and ``ogd``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from learners.ogd import OGD
from learners.rls import RLS
from tests.learners._resume import assert_resumes_bit_identically


@pytest.mark.parametrize(
    ("d", "forgetting", "delta"),
    list(itertools.product((1, 3, 8), (0.5, 0.9, 0.99, 1.0), (0.5, 3.0))),
)
def test_rls_matches_weighted_ridge_solve(d: int, forgetting: float, delta: float) -> None:
    # mu_t = x_t^T argmin_w sum_{s<t} f^{t-1-s} (y_s - x_s^T w)^2 / 2 + f^{t-1} delta |w|^2 / 2
    rng = np.random.default_rng(d + int(100 * forgetting))
    T = 300
    X, y = rng.standard_normal((T, d)), rng.standard_normal(T)
    model = RLS(d, forgetting=forgetting, delta=delta)
    A, b = delta * np.eye(d), np.zeros(d)
    for x, v in zip(X, y, strict=True):
        expect = x @ np.linalg.solve(A, b)
        assert model.learn(x, float(v)).prediction == pytest.approx(expect, rel=1e-8, abs=1e-10)
        A = forgetting * A + np.outer(x, x)
        b = forgetting * b + v * x
    np.testing.assert_allclose(model.weights, np.linalg.solve(A, b), rtol=1e-8, atol=1e-10)


def test_rls_tracks_a_jump() -> None:
    rng = np.random.default_rng(0)
    fast, slow = RLS(3, forgetting=0.9), RLS(3, forgetting=1.0)
    u1, u2 = rng.standard_normal(3), rng.standard_normal(3)
    late = {"fast": 0.0, "slow": 0.0}
    for t in range(1000):
        x = rng.standard_normal(3)
        v = float(x @ (u1 if t < 500 else u2))
        lf, ls = fast.learn(x, v).loss, slow.learn(x, v).loss
        if t >= 600:
            late["fast"] += lf
            late["slow"] += ls
    assert late["fast"] < 1e-6 < late["slow"]


@pytest.mark.parametrize("schedule", ["constant", "sqrt"])
def test_ogd_matches_manual_loop(schedule: str) -> None:
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((200, 4)), rng.standard_normal(200)
    model = OGD(4, lr=0.05, schedule=schedule)
    w = np.zeros(4)
    for t, (x, v) in enumerate(zip(X, y, strict=True), start=1):
        eta = 0.05 if schedule == "constant" else 0.05 / math.sqrt(t)
        rep = model.learn(x, float(v))
        assert rep.prediction == pytest.approx(w @ x, rel=1e-12, abs=1e-15)
        assert rep.diagnostics["lr"] == pytest.approx(eta)
        w = w + eta * (v - w @ x) * x
    np.testing.assert_allclose(model.weights, w, rtol=1e-12)


@pytest.mark.parametrize(
    ("kind", "params"),
    [(RLS, {"forgetting": 0.95}), (OGD, {"lr": 0.02, "schedule": "sqrt"})],
)
def test_checkpoint_roundtrip_bit_identical(kind, params) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((300, 5)), rng.standard_normal(300)
    assert_resumes_bit_identically(kind(5, **params), X, y, 100)


def test_zero_vector_and_d1() -> None:
    for model in (RLS(1, forgetting=0.9), OGD(1)):
        assert model.learn(np.zeros(1), 1.0).prediction == 0.0
        assert math.isfinite(model.learn(np.ones(1), 1.0).prediction)
