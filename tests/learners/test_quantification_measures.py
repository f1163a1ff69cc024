"""The quantification measures (``docs/algorithms/nemsis.md``): golden values, counts vs
rates, bounds, limits, cross-checked against QuaPy's smoothed KLD where it defines the same
measure."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners import quantification as Q

RTOL = 1e-9
# the §1.5 worked example: |S| = 100, TP = 20, FN = 10, TN = 66, FP = 4
TP, FP, FN, TN = 20, 4, 10, 66


def _random_counts(rng: np.random.Generator, n: int) -> list[tuple[int, int, int, int]]:
    out = []
    while len(out) < n:
        size = int(rng.integers(10, 1001))
        pos = int(rng.integers(1, size))
        neg = size - pos
        tp = int(rng.integers(0, pos + 1))
        tn = int(rng.integers(0, neg + 1))
        out.append((tp, neg - tn, pos - tp, tn))
    return out


# ---- §7.1.1 ------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.01, 0.3, 0.5])
@pytest.mark.parametrize("n_samples", [None, 100, 7])
def test_kld_of_identical_prevalences_is_zero(p: float, n_samples: int | None) -> None:
    assert Q.kld(p, p, n_samples) == 0.0


def test_kld_is_nonnegative_on_random_pairs() -> None:
    rng = np.random.default_rng(0)
    p, q = rng.random(1000), rng.random(1000)
    assert np.all(Q.kld(p, q) >= 0.0)
    assert np.all(Q.kld(p, q, 50) >= 0.0)


# ---- §7.1.2 golden values ----------------------------------------------------------------
def test_golden_values_of_the_worked_example() -> None:
    P, N, p, size = Q.rates_from_counts(TP, FP, FN, TN)
    assert (P, N, p, size) == pytest.approx((2 / 3, 66 / 70, 0.3, 100), rel=RTOL)
    assert Q.cc_prevalence_rates(P, N, p) == pytest.approx(0.24, rel=RTOL)
    golden = {
        "ba": (Q.ba(TP, FP, FN, TN), 0.8047619),
        "kld": (Q.kld_counts(TP, FP, FN, TN, smoothed=False), 0.0093764),
        "kld_eps": (Q.kld_counts(TP, FP, FN, TN), 0.0091370),
        "kld_eps_prev": (Q.kld(0.3, 0.24, 100), 0.0091370),
        "nss": (Q.nss(TP, FP, FN, TN), 0.9926531),
        "cqb": (Q.cqb(TP, FP, FN, TN), 84.0),
        "q1": (Q.q_beta(TP, FP, FN, TN), 0.8888870),
        "q2": (Q.q_beta(TP, FP, FN, TN, beta=2.0), 0.9483691),
        "bakld": (Q.bakld(TP, FP, FN, TN, C=0.5), 0.3978125),
        "cqreward": (Q.cqreward(TP, FP, FN, TN), 0.7988925),
        "bkreward": (Q.bkreward(TP, FP, FN, TN), 0.7974754),
        "kld_fixed": (Q.kld(0.5, 0.25), 0.1438410),
        "kld_smoothed_zero": (Q.kld(0.1, 0.0, 100), 0.2225977),
        "q1_combine": (Q.q_beta_combine(0.8, 0.9, 1.0), 0.8470588),
        "q2_combine": (Q.q_beta_combine(0.8, 0.9, 2.0), 0.8780488),
    }
    for name, (got, want) in golden.items():
        assert abs(got - want) <= 1e-6, f"{name}: {got} != {want}"
    assert Q.nss(TP, FP, FN, TN) == pytest.approx(1 - (6 / 70) ** 2, rel=RTOL)
    assert Q.q_beta(TP, FP, FN, TN, beta=2.0) == pytest.approx(
        5 * 0.8047619047619048 * (1 - (6 / 70) ** 2) / (4 * 0.8047619047619048 + 1 - (6 / 70) ** 2),
        rel=RTOL,
    )
    assert Q.ber(TP, FP, FN, TN) == pytest.approx(1 - 0.8047619047619048, rel=RTOL)
    assert Q.min_tpr_tnr(TP, FP, FN, TN) == pytest.approx(2 / 3, rel=RTOL)


def test_kld_matches_quapy_smoothed_kld() -> None:
    qp_error = pytest.importorskip("quapy.error")
    rng = np.random.default_rng(1)
    for _ in range(200):
        p, q = rng.random(), rng.random()
        n = int(rng.integers(2, 10_000))
        ours = Q.kld(p, q, n)
        theirs = qp_error.kld(np.array([p, 1 - p]), np.array([q, 1 - q]), eps=1.0 / (2 * n))
        assert ours == pytest.approx(float(theirs), rel=RTOL, abs=1e-15)
        assert Q.smooth(p, 1 / (2 * n)) == pytest.approx(
            float(qp_error.smooth(np.array([p, 1 - p]), 1 / (2 * n))[0]), rel=RTOL
        )


# ---- §7.1.3 counts <-> rates -------------------------------------------------------------
def test_every_measure_from_counts_equals_its_rate_form() -> None:
    rng = np.random.default_rng(2)
    for tp, fp, fn, tn in _random_counts(rng, 300):
        P, N, p, size = Q.rates_from_counts(tp, fp, fn, tn)
        eps = 1.0 / (2.0 * size)
        pairs = [
            (Q.ba(tp, fp, fn, tn), Q.ba_rates(P, N)),
            (Q.ber(tp, fp, fn, tn), Q.ber_rates(P, N)),
            (Q.min_tpr_tnr(tp, fp, fn, tn), Q.min_tpr_tnr_rates(P, N)),
            (Q.kld_counts(tp, fp, fn, tn), Q.kld_rates(P, N, p, eps)),
            (Q.kld_counts(tp, fp, fn, tn, smoothed=False), Q.kld_rates(P, N, p, 0.0)),
            (Q.nss(tp, fp, fn, tn), Q.nss_rates(P, N, p)),
            (
                Q.nss(tp, fp, fn, tn, kappa="paper_table"),
                Q.nss_rates(P, N, p, kappa="paper_table"),
            ),
            (Q.cqb(tp, fp, fn, tn), Q.cqb_rates(P, N, p, size)),
            (Q.q_beta(tp, fp, fn, tn, beta=0.5), Q.q_beta_rates(P, N, p, beta=0.5)),
            (Q.bakld(tp, fp, fn, tn, C=0.3), Q.bakld_rates(P, N, p, C=0.3, eps=eps)),
            (Q.cqreward(tp, fp, fn, tn), Q.cqreward_rates(P, N, p)),
            (Q.bkreward(tp, fp, fn, tn), Q.bkreward_rates(P, N, p, eps=eps)),
        ]
        for got, want in pairs:
            assert got == pytest.approx(want, rel=RTOL, abs=1e-9 * max(1.0, size**2))


def test_negkld_decomposes_into_nested_parts() -> None:
    from learners.quantification import nested

    rng = np.random.default_rng(3)
    for _ in range(500):
        r1, r2, p = rng.random(), rng.random(), rng.uniform(0.01, 0.99)
        eps = float(rng.choice([0.0, 1e-3, 0.05]))
        if eps == 0.0 and min(p * r1 + (1 - p) * (1 - r2), (1 - p) * r2 + p * (1 - r1)) < 1e-9:
            continue
        ps = (p + eps) / (1 + 2 * eps)
        ns = 1 - ps
        h = -ps * math.log(ps) - ns * math.log(ns)
        z1 = nested.zeta("logpos", r1, r2, p, eps, 1.0)
        z2 = nested.zeta("logneg", r1, r2, p, eps, 1.0)
        lhs = -Q.kld_rates(r1, r2, p, eps)
        assert lhs == pytest.approx(ps * z1 + ns * z2 + h - math.log(1 + 2 * eps), abs=1e-12)
        assert nested.zeta("negkld", r1, r2, p, eps, 1.0) == pytest.approx(lhs, abs=1e-12)


# ---- §7.1.4 - §7.1.6 ---------------------------------------------------------------------
@pytest.mark.parametrize("p_hat", [0.0, 1.0])
@pytest.mark.parametrize("p", [0.0, 0.01, 0.3, 0.5, 0.99, 1.0])
@pytest.mark.parametrize("n_samples", [1, 10, 1000, 10**6])
def test_smoothing_bounds_kld(p_hat: float, p: float, n_samples: int) -> None:
    eps = 1.0 / (2 * n_samples)
    assert Q.kld(p, p_hat, n_samples) <= math.log(1 / eps) + math.log(2)


def test_nss_range_cqb_identity_and_cqreward_bounds() -> None:
    rng = np.random.default_rng(4)
    for tp, fp, fn, tn in _random_counts(rng, 1000):
        for kappa in ("max", "paper_table"):
            v = Q.nss(tp, fp, fn, tn, kappa=kappa)
            assert 0.0 <= v <= 1.0
        assert Q.cqb(tp, fp, fn, tn) == abs(fp - fn) * (fp + fn)
        b, c = Q.ba(tp, fp, fn, tn), Q.cqreward(tp, fp, fn, tn)
        assert b / 2 <= c <= b


def test_q_beta_limits() -> None:
    rng = np.random.default_rng(5)
    for tp, fp, fn, tn in _random_counts(rng, 200):
        b, s = Q.ba(tp, fp, fn, tn), Q.nss(tp, fp, fn, tn)
        assert Q.q_beta(tp, fp, fn, tn, beta=1e-4) == pytest.approx(b, abs=1e-6)
        assert Q.q_beta(tp, fp, fn, tn, beta=1e4) == pytest.approx(s, abs=1e-6)


def test_confusion_counts_accepts_both_label_codings() -> None:
    y = np.array([1, -1, 1, 1, -1, -1])
    yhat = np.array([1, 1, -1, 1, -1, -1])
    assert Q.confusion_counts(y, yhat) == (2, 1, 1, 2)
    assert Q.confusion_counts((y > 0).astype(int), yhat > 0) == (2, 1, 1, 2)
    m = Q.all_measures(2, 1, 1, 2)
    assert m["ba"] == pytest.approx(2 / 3, rel=RTOL) and m["prevalence"] == 0.5


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError):
        Q.ba(-1, 0, 0, 1)
    with pytest.raises(ValueError):
        Q.kld(0.2, 0.3, 0)
    with pytest.raises(ValueError):
        Q.nss(1, 1, 1, 1, kappa="bogus")
