"""NEMSIS mechanics, convergence and streaming (``docs/algorithms/nemsis.md``)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from learners import quantification as Q
from learners.checks import assert_states_equal
from learners.codec import decode_state, encode_state
from learners.quantification.nemsis import NEMSIS
from learners.quantification.scan import SCAN

D = 10
T = 20_000
N_TEST = 50_000
SEEDS = range(5)


# ---- data (§6.2 generator) ---------------------------------------------------------------
def gaussian(rng: np.random.Generator, n: int, p: float, u: np.ndarray, delta: float = 1.5):  # type: ignore[no-untyped-def]
    """y ~ Bernoulli(p); x | y ~ N(y (delta/2) u, I_d) (the bias is the learner's)."""
    y = np.where(rng.random(n) < p, 1, -1)
    return rng.normal(size=(n, u.size)) + (y * delta / 2)[:, None] * u, y


def direction(seed: int) -> tuple[np.random.Generator, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.normal(size=D)
    return rng, u / np.linalg.norm(u)


def separable(rng: np.random.Generator, n: int, p: float, u: np.ndarray):  # type: ignore[no-untyped-def]
    """Labels sign(<u, x>), points with |<u, x>| < 0.5 rejected, classes drawn with prior p."""
    y = np.where(rng.random(n) < p, 1, -1)
    X = np.empty((n, u.size))
    for label in (1, -1):
        idx = np.flatnonzero(y == label)
        got: list[np.ndarray] = []
        while sum(len(g) for g in got) < idx.size:
            Z = rng.normal(size=(4 * idx.size + 16, u.size))
            s = Z @ u
            got.append(Z[(label * s) >= 0.5])
        X[idx] = np.concatenate(got)[: idx.size]
    return X, y


def evaluate(model: NEMSIS | SCAN, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
    pred = np.where(model.decision_function(X) > 0, 1, -1)
    return Q.all_measures(*Q.confusion_counts(y, pred))


@cache
def run(  # type: ignore[no-untyped-def]
    measure: str,
    p: float,
    seed: int,
    steps: int = T,
    data: str = "gauss",
    running: bool = False,
    **kw,
):
    """Train on ``steps`` events (prior = training prevalence, or running when asked),
    evaluate on 50,000 fresh test events of the same distribution."""
    rng, u = direction(seed)
    gen = gaussian if data == "gauss" else separable
    X, y = gen(rng, steps, p, u)
    Xt, yt = gen(rng, N_TEST, p, u)
    prior = None if running else float(np.mean(y > 0))
    model = NEMSIS(D, measure=measure, prior=prior, eps=1 / (2 * steps), **kw)
    model.learn_many(X, [int(v) for v in y])
    return model, evaluate(model, Xt, yt)


# ---- §7.3 mechanics ----------------------------------------------------------------------
def test_projection_and_exact_averaging() -> None:
    rng, u = direction(0)
    X, y = gaussian(rng, 2000, 0.3, u)
    model = NEMSIS(D, measure="bakld", radius=0.3, eta0=5.0, prior=0.3)
    total = np.zeros(D + 1)
    for x, v in zip(X, y, strict=True):
        model.learn(x, int(v))
        assert np.linalg.norm(model.w_) <= 0.3 * (1 + 1e-12)
        total += model.w_
    assert np.array_equal(model.w_sum_, total)
    assert np.array_equal(model.weights, (total / 2000)[:D])
    assert model.intercept == (total / 2000)[D]


@pytest.mark.parametrize("measure", ["negkld", "q", "bakld"])
def test_ns_reward_averages_are_empirical_rates(measure: str) -> None:
    rng, u = direction(1)
    X, y = gaussian(rng, 1500, 0.25, u)
    p = 0.25
    model = NEMSIS(D, measure=measure, prior=p)
    hits = {1: 0, -1: 0}
    for x, v in zip(X, y, strict=True):
        m = int(v) * float(model.w_ @ np.append(x, 1.0))
        hits[int(v)] += m > 0
        model.learn(x, int(v))
    t = model.t_
    assert model.sum_r_[0] / t == pytest.approx(hits[1] / (t * p), rel=1e-12)
    assert model.sum_r_[1] / t == pytest.approx(hits[-1] / (t * (1 - p)), rel=1e-12)


def test_zero_duals_make_the_first_step_a_noop_and_rho0_makes_it_finite() -> None:
    rng, u = direction(2)
    X, y = gaussian(rng, 5, 0.5, u)
    model = NEMSIS(D, prior=0.5)
    for name in ("dual_alpha_", "dual_beta_", "dual_gamma_"):
        getattr(model, name)[:] = 0.0
    model.learn(X[0], int(y[0]))
    assert np.array_equal(model.w_, np.zeros(D + 1))
    for measure in ("negkld", "q", "bakld"):
        for ns in (True, False):
            fresh = NEMSIS(D, measure=measure, ns=ns, eps=1e-6)
            fresh.learn(X[0], int(y[0]))
            for v in fresh.state().values():
                if isinstance(v, np.ndarray):
                    assert np.all(np.isfinite(v))


def test_bkreward_valuation_is_a_rescaled_bakld() -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        P, N = rng.random(2)
        p, v, eps = float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.0, 2.0)), 1e-3
        val = Q.ba_rates(P, N) - v * (1 + Q.kld_rates(P, N, p, eps))
        alt = (1 + v) * Q.bakld_rates(P, N, p, C=1 / (1 + v), eps=eps) - v
        assert val == pytest.approx(alt, rel=1e-9, abs=1e-12)


# ---- §7.4 convergence --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("p", [0.05, 0.2, 0.5])
def test_negkld_ns_converges(p: float) -> None:
    for seed in SEEDS:
        _, m = run("negkld", p, seed)
        assert m["kld"] < 0.005, (seed, m)
        assert abs(m["cc"] - m["prevalence"]) < 0.03, (seed, m)


@pytest.mark.slow
def test_negkld_error_shrinks_with_t() -> None:
    for p in (0.05, 0.2, 0.5):
        late = np.mean([run("negkld", p, s)[1]["kld"] for s in SEEDS])
        early = np.mean([run("negkld", p, s, steps=500)[1]["kld"] for s in SEEDS])
        assert late < early, (p, late, early)


@pytest.mark.slow
def test_bakld_and_q_reach_the_spec_levels() -> None:
    for seed in SEEDS:
        _, m = run("bakld", 0.2, seed, C=0.5)
        assert m["ba"] >= 0.73 and m["kld"] <= 0.02, (seed, m)
        _, m = run("q", 0.5, seed)
        assert m["q_beta"] >= 0.85, (seed, m)


@pytest.mark.slow
def test_separable_data() -> None:
    for seed in SEEDS:
        _, m = run("bakld", 0.3, seed, data="sep", C=0.5)
        assert abs(m["cc"] - m["prevalence"]) < 0.01 and m["ba"] >= 0.98, (seed, m)
        _, m = run("negkld", 0.3, seed, data="sep")
        assert abs(m["cc"] - m["prevalence"]) < 0.04, (seed, m)
        _, m = run("bakld", 0.5, seed, data="sep", C=1.0)
        assert m["ba"] >= 0.98, (seed, m)


@pytest.mark.slow
def test_bakld_c_sweep_trend() -> None:
    lo = [run("bakld", 0.2, s, C=0.0)[1] for s in SEEDS]
    hi = [run("bakld", 0.2, s, C=1.0)[1] for s in SEEDS]
    assert np.mean([m["ba"] for m in hi]) >= np.mean([m["ba"] for m in lo]) + 0.1
    for a, b in zip(lo, hi, strict=True):
        assert a["kld"] <= b["kld"]


# ---- §7.6 streaming / service ------------------------------------------------------------
def _mixed_stream(seed: int, n: int) -> tuple[np.ndarray, list[int | None]]:
    rng, u = direction(seed)
    X, y = gaussian(rng, n, 0.3, u)
    labels: list[int | None] = [int(v) for v in y]
    for i in range(0, n, 4):
        labels[i] = None
    return X, labels


@pytest.mark.parametrize(
    "make",
    [
        lambda: NEMSIS(D, window=64),
        lambda: NEMSIS(D, measure="negkld", window=64),
        lambda: NEMSIS(D, measure="q", prior=0.3),
        lambda: SCAN(D, s0=40, level_min=10, window=32),
        lambda: SCAN(D, measure="bkreward", ns=False, s0=30, growth=1.5, level_min=7),
    ],
)
def test_checkpoint_round_trip_is_bit_exact(make) -> None:  # type: ignore[no-untyped-def]
    X, y = _mixed_stream(4, 900)
    a = make()
    a.learn_many(X[:400], y[:400])
    b = type(a).from_state(decode_state(encode_state(a.state())))
    b.learn_many(X[400:], y[400:])
    ref = make()
    ref.learn_many(X, y)
    assert_states_equal(b.state(), ref.state())


@pytest.mark.slow
def test_acc_corrects_cc_under_prior_drift() -> None:
    for seed in SEEDS:
        model, _ = run("bakld", 0.2, seed, C=0.5)
        rng = np.random.default_rng(100 + seed)
        for p_new in (0.05, 0.6):
            Xt, yt = gaussian(rng, N_TEST, p_new, direction(seed)[1])
            truth = float(np.mean(yt > 0))
            err_cc = abs(model.quantify(Xt, method="cc") - truth)
            err_acc = abs(model.quantify(Xt, method="acc") - truth)
            assert err_acc < err_cc, (seed, p_new, err_cc, err_acc)


@pytest.mark.slow
def test_running_prior_matches_fixed_prior() -> None:
    for seed in SEEDS:
        _, fixed = run("bakld", 0.2, seed, C=0.5)
        _, running = run("bakld", 0.2, seed, C=0.5, running=True)
        assert abs(fixed["ba"] - running["ba"]) <= 0.02, (seed, fixed, running)
        assert abs(fixed["kld"] - running["kld"]) <= 0.005, (seed, fixed, running)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_forgetting_mode_follows_a_prior_change(seed: int) -> None:
    """§3.4 [EXT]: with a half-life the running prior and CC track a prior switch that the
    paper's 1/t averages (half_life=None) only half follow."""
    rng, u = direction(seed)
    X1, y1 = gaussian(rng, 10_000, 0.2, u)
    X2, y2 = gaussian(rng, 10_000, 0.6, u)
    Xt, yt = gaussian(rng, 20_000, 0.6, u)
    X, y = np.vstack([X1, X2]), [int(v) for v in np.concatenate([y1, y2])]
    truth = float(np.mean(yt > 0))
    errs = {}
    for half_life in (None, 1000.0):
        m = NEMSIS(D, measure="bakld", C=0.5, half_life=half_life, eps=1e-4)
        m.learn_many(X, y)
        errs[half_life] = abs(m.quantify(Xt, method="cc") - truth)
        if half_life is not None:
            assert abs(m.class_prior - 0.6) < 0.05
        else:
            assert abs(m.class_prior - 0.4) < 0.02  # the cumulative estimate
    assert errs[1000.0] < errs[None], errs
