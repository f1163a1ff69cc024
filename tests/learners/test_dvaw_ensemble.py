"""Discounted-VAW meta-ensemble (``docs/algorithms/dvaw.md``, "Ensemble")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners import build
from learners.dvaw import DiscountedVAW, clip
from learners.dvaw_ensemble import DVAWEnsemble, expert_grid, fixed_share_step, share_rate
from tests.learners._resume import assert_resumes_bit_identically

MODES = [(h, r) for h in ("self", "external") for r in ("last", "zero")]


# ---- §8 item 14: grid ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("d", "T", "b", "n"),
    [
        (10, 20000, 2, 16),
        (10, 10**6, 2, 21),
        (1, 2, 2, 2),
        (1, 3, 2, 3),
        (3, 100, 2, 8),
        (5, 8192, 2, 14),
        (10, 2**40, 2, 41),
        (10, 2**40, 4, 22),
    ],
)
def test_grid_vectors(d: int, T: int, b: float, n: int) -> None:
    eta = expert_grid(d, T, b)
    assert len(eta) + 1 == n
    assert eta[-1] == d * T
    gammas = [e / (1 + e) for e in eta]
    assert all(g1 < g2 for g1, g2 in zip(gammas, gammas[1:], strict=False))


def test_grid_values() -> None:
    g = DVAWEnsemble(10, horizon=20000).gammas
    np.testing.assert_allclose(g[:5], [0, 20 / 21, 40 / 41, 80 / 81, 160 / 161], rtol=1e-15)
    assert g[-1] == 200000 / 200001
    assert DVAWEnsemble(1, horizon=2).gammas.tolist() == [0.0, 2 / 3]
    assert DVAWEnsemble(1, horizon=3).gammas.tolist() == [0.0, 2 / 3, 3 / 4]


# ---- helpers ------------------------------------------------------------------------------
def heavy_stream(T: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    U = np.cumsum(0.05 * rng.standard_normal((T, d)), axis=0)
    y = np.einsum("td,td->t", X, U) + 0.3 * rng.standard_t(2, size=T) + 2.0
    return X, y


def record(model: DVAWEnsemble, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per round: meta prediction, raw expert predictions, M_{t+1} and L_t."""
    out: dict[str, list] = {k: [] for k in ("yhat", "raw", "M", "L")}
    for x, v in zip(X, y, strict=True):
        f = model._forecast(x, None)
        rep = model.learn(x, float(v))
        assert rep.prediction == f.value
        out["yhat"].append(f.value)
        out["raw"].append(f.raw)
        out["M"].append(model.M_)
        out["L"].append(model.L_)
    return {k: np.array(v) for k, v in out.items()}


def interval_bound(M_next: float, L_b: float, n: int, b: int) -> float:
    """Thm 4.1 / Lemma D.3 + Thm E.1: 1/2 M_{b+1}^2 + 2 L_b (2 ln(N((e+b) ln^2(e+b)+1)) + 1)."""
    a = math.e + b
    return 0.5 * M_next**2 + 2 * L_b * (2 * math.log(n * (a * math.log(a) ** 2 + 1)) + 1)


def check_intervals(yhat, raw, y, M, L, n, rng, count=300) -> None:  # type: ignore[no-untyped-def]
    T = y.size
    meta = 0.5 * (y - yhat) ** 2
    experts = 0.5 * (y[:, None] - raw) ** 2
    cm = np.concatenate([[0.0], np.cumsum(meta)])
    ce = np.vstack([np.zeros(n), np.cumsum(experts, axis=0)])
    for _ in range(count):
        a, b = sorted(rng.integers(1, T + 1, size=2))
        gap = (cm[b] - cm[a - 1]) - (ce[b] - ce[a - 1])  # every expert j at once
        assert np.all(gap <= interval_bound(M[b - 1], L[b - 1], n, b) + 1e-9)


# ---- §8 item 11: meta vs experts ------------------------------------------------------------
@pytest.mark.parametrize(("hint", "ref"), MODES)
def test_meta_vs_experts_on_every_interval(hint: str, ref: str) -> None:
    X, y = heavy_stream(600, 3, seed=len(hint) + len(ref))
    model = DVAWEnsemble(3, horizon=600, hint=hint, ref=ref)
    rec = record(model, X, y)
    n = model.gammas.size
    check_intervals(rec["yhat"], rec["raw"], y, rec["M"], rec["L"], n, np.random.default_rng(0))


def run_meta_on_synthetic(preds: np.ndarray, y: np.ndarray, ref_zero: bool) -> tuple:  # type: ignore[type-arg]
    """Alg. 2 + Alg. 3 with arbitrary expert predictions, using the library's kernels."""
    T, n = preds.shape
    logp = np.full(n, -math.log(n))
    M = L = y_prev = 0.0
    yhat, Ms, Ls = np.empty(T), np.empty(T), np.empty(T)
    for t in range(T):
        y_ref = 0.0 if ref_zero else y_prev
        clipped = clip(preds[t], y_ref - M, y_ref + M)
        p = np.exp(logp)
        yhat[t] = p @ clipped
        logp, L = fixed_share_step(logp, 0.5 * (y[t] - clipped) ** 2, L, t + 1, -math.log(n))
        M = max(M, abs(y[t] - y_ref))
        y_prev = y[t]
        Ms[t], Ls[t] = M, L
    return yhat, Ms, Ls


def test_meta_vs_adversarial_synthetic_experts() -> None:
    rng = np.random.default_rng(7)
    for trial in range(100):
        T, n = int(rng.integers(20, 200)), int(rng.integers(2, 12))
        y = rng.standard_normal(T) * rng.choice([0.1, 1, 10])
        preds = y[:, None] + rng.standard_normal((T, n)) * rng.uniform(0.1, 5, size=n)
        good = int(rng.integers(n))  # one expert is good on a random window only
        lo = int(rng.integers(T))
        preds[lo : lo + T // 3, good] = y[lo : lo + T // 3]
        preds[:, 0] = -preds[:, 0] * (trial % 2)  # a sign-flipping adversary
        yhat, M, L = run_meta_on_synthetic(preds, y, ref_zero=bool(trial % 3))
        check_intervals(yhat, preds, y, M, L, n, rng, count=30)


# ---- §8 item 12: fixed share ----------------------------------------------------------------
def test_fixed_share_properties() -> None:
    X, y = heavy_stream(400, 3, seed=1)
    model = DVAWEnsemble(3, horizon=400)
    n = model.gammas.size
    p_lin = np.full(n, 1.0 / n)
    L_prev = 0.0
    for t, (x, v) in enumerate(zip(X, y, strict=True), start=1):
        f = model._forecast(x, None)
        model.learn(x, float(v))
        p = np.exp(model.logp_)
        assert abs(p.sum() - 1.0) <= 1e-12
        assert np.all(p >= share_rate(t) / n * (1 - 1e-12))  # p_{t+1,j} >= beta_{t+1} / N
        assert model.L_ >= L_prev  # alpha_t = 1/(2 L_t) non-increasing
        L_prev = model.L_
        # linear-domain Alg. 3 agrees with the log domain when nothing underflows
        ell = 0.5 * (v - f.clipped) ** 2
        q = p_lin * np.exp(-ell / (2 * model.L_))
        q /= q.sum()
        beta = share_rate(t)
        p_lin = (1 - beta) * q + beta / n
        np.testing.assert_allclose(p, p_lin, rtol=1e-10, atol=1e-15)


def test_zero_losses_leave_weights_unchanged() -> None:
    # L_t = 0 leaves p unchanged (§4.3); §8 item 19: all-zero targets
    model = DVAWEnsemble(2, horizon=100, ref="zero")
    rng = np.random.default_rng(0)
    for _ in range(50):
        model.learn(rng.normal(size=2), 0.0)
    assert model.L_ == 0.0 and model.M_ == 0.0
    np.testing.assert_allclose(np.exp(model.logp_), 1.0 / model.gammas.size, rtol=1e-14)


# ---- §8 item 13: clipping -------------------------------------------------------------------
@pytest.mark.parametrize(("hint", "ref"), MODES)
def test_clipping(hint: str, ref: str) -> None:
    X, y = heavy_stream(300, 3, seed=4)
    model = DVAWEnsemble(3, horizon=300, hint=hint, ref=ref)
    M_prev = 0.0
    for t, (x, v) in enumerate(zip(X, y, strict=True)):
        f = model._forecast(x, None)
        lo, hi = f.y_ref - model.M_, f.y_ref + model.M_
        yhat = model.learn(x, float(v)).prediction
        assert lo - 1e-12 <= yhat <= hi + 1e-12
        if t == 0:
            assert yhat == f.y_ref == 0.0
        assert model.M_ >= M_prev
        M_prev = model.M_
        assert np.max(0.5 * (v - f.clipped) ** 2) <= 2 * model.M_**2 * (1 + 1e-12)
        if hint == "self":  # self-confident expert + clipping == clipped RLS (§3.6)
            np.testing.assert_allclose(f.clipped[1:], clip(f.b.mu, lo, hi), rtol=1e-12, atol=1e-12)


# ---- stacked experts == independent learners ----------------------------------------------
def test_stacked_experts_equal_independent_dvaw() -> None:
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((500, 4)), rng.standard_normal(500)
    model = DVAWEnsemble(4, horizon=500, hint="external", ref="zero", stabilised=False)
    singles = [DiscountedVAW(4, gamma=g, hint="zero", stabilised=False) for g in model.gammas[1:]]
    for x, v in zip(X, y, strict=True):
        raw = model._forecast(x, None).raw
        model.learn(x, float(v))
        for i, s in enumerate(singles, start=1):
            assert s.learn(x, float(v)).prediction == pytest.approx(raw[i], rel=1e-12, abs=1e-14)
    for i, s in enumerate(singles):
        np.testing.assert_allclose(model.P_[i], s.P_[0], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(model.v_[i], s.v_[0], rtol=1e-10, atol=1e-14)


# ---- §8 item 15: 20 000 events at d = 10 ----------------------------------------------------
@pytest.mark.slow
def test_20k_events_finite_and_match_direct_solve_per_expert() -> None:
    T, d = 20_000, 10
    rng = np.random.default_rng(0)
    X = rng.standard_normal((T, d))
    X[:, 7:] = 0.0  # `rankdef`: 3 never-excited directions wind the discounted ridge up
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(T)
    model = DVAWEnsemble(d, horizon=T)
    assert model.gammas[1] == 20 / 21
    worst = 0.0
    for t in range(T):
        x = X[t]
        mu = model.v_ @ x
        direct = np.linalg.solve(model.Sigma_, model.theta_[:, :, None])[:, :, 0] @ x
        worst = max(worst, float(np.max(np.abs(mu - direct) / (1 + np.abs(direct)))))
        rep = model.learn(x, float(y[t]))
        assert math.isfinite(rep.prediction)
    assert worst <= 1e-6
    assert np.all(np.isfinite(model.P_)) and np.all(np.isfinite(model.logp_))
    assert model.floor_lifts_ > 0  # the floor was needed


# ---- §8 item 16: lower-bound sanity ---------------------------------------------------------
@pytest.mark.slow
def test_lower_bound_sanity() -> None:
    T, d, sigma = 1000, 10, 0.5
    algs = [
        ("vaw", {}),
        ("dvaw", {"gamma": 0.95}),
        ("dvaw-ensemble", {"horizon": T}),
        ("dvaw-ensemble", {"horizon": T, "hint": "external", "ref": "zero"}),
        ("rls", {"forgetting": 0.9}),
        ("ogd", {"lr": 0.03}),
    ]
    regrets = np.zeros(len(algs))
    for seed in range(10):
        rng = np.random.default_rng(seed)
        idx = np.arange(T) % d
        X = np.eye(d)[idx]
        y = sigma * rng.choice([-1, 1], size=T)  # the comparator fits every block: loss 0
        for i, (kind, params) in enumerate(algs):
            model = build(kind, d, **params)
            regrets[i] += sum(
                0.5 * model.learn(x, float(v)).loss for x, v in zip(X, y, strict=True)
            )
    assert np.all(regrets / 10 >= 0.9 * 0.5 * sigma**2 * T)


# ---- §8 item 9 (soft): visible log growth of the meta's static regret -----------------------
@pytest.mark.slow
def test_meta_static_regret_grows_logarithmically() -> None:
    rng = np.random.default_rng(1)
    d, T = 10, 16_000
    X = rng.standard_normal((T, d))
    u = rng.standard_normal(d)
    y = X @ (u / np.linalg.norm(u)) + 0.1 * rng.standard_normal(T)
    model = DVAWEnsemble(d, horizon=T)
    preds = np.array([model.learn(x, float(v)).prediction for x, v in zip(X, y, strict=True)])
    Ts = [1000 * 2**k for k in range(5)]
    regrets = []
    for n in Ts:
        u_star = np.linalg.lstsq(X[:n], y[:n], rcond=None)[0]
        regrets.append(0.5 * np.sum((y[:n] - preds[:n]) ** 2 - (y[:n] - X[:n] @ u_star) ** 2))
    c = np.polyfit(np.log(Ts), regrets, 1)[0]
    assert c <= d / 2 * np.max(y**2)
    assert max(regrets) < 100


# ---- §8 items 18, 19 and diagnostics --------------------------------------------------------
@pytest.mark.parametrize(("hint", "ref"), MODES)
def test_checkpoint_roundtrip_bit_identical(hint: str, ref: str) -> None:
    X, y = heavy_stream(400, 4, seed=2)
    a = DVAWEnsemble(4, horizon=1000, hint=hint, ref=ref, refresh=16)
    assert_resumes_bit_identically(a, X, y, 150)


def test_edge_cases_and_diagnostics() -> None:
    rng = np.random.default_rng(0)
    model = DVAWEnsemble(3, horizon=500)
    rep = model.learn(np.zeros(3), 1.0)  # x = 0 and T = 1: predicts y^Ref_1 = 0
    assert rep.prediction == 0.0
    for _ in range(200):
        rep = model.learn(rng.normal(size=3), float(rng.normal() * 1e150))  # huge |y|
        assert math.isfinite(rep.prediction)
    n = model.gammas.size
    weights = [rep.diagnostics[f"weight_{i}"] for i in range(n)]
    assert abs(sum(weights) - 1.0) < 1e-12
    assert [rep.diagnostics[f"gamma_{i}"] for i in range(n)] == model.gammas.tolist()
    assert 1.0 <= rep.diagnostics["effective_memory"] <= 1 + 3 * 500
    assert set(rep.diagnostics) == set(model.learn(np.ones(3), 0.0).diagnostics)  # bounded keys
    one = DVAWEnsemble(1, horizon=10)
    for t in range(30):
        assert math.isfinite(one.learn(np.array([1.0]), float(t % 3)).prediction)


def test_event_hint_is_the_reference() -> None:
    model = DVAWEnsemble(2, horizon=100)
    assert model.predict(np.ones(2), hint=3.5).value == 3.5  # B_1 = {y^Ref_1}
