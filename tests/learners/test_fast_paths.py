"""The speed paths (pa's inlined ``learn``, ``_check_x``'s x.x proof, the dvaw kernel's
double buffers and one-pass symmetry check) give the same bits, errors and states as the
general paths they stand for."""

from __future__ import annotations

import numpy as np
import pytest

import learners
from learners.base import Learner
from learners.checks import assert_states_equal
from learners.dvaw import commit, spare_for, stack_attrs


@pytest.mark.parametrize("params", learners.REGISTRY["pa"]._test_params())
def test_pa_learn_equals_base_path(params: dict) -> None:
    cls = learners.REGISTRY["pa"]
    X, y = cls._test_stream(7, 300, 3)
    X[5] *= 1e-160  # tiny rows, huge rows, zero rows
    X[9] *= 1e150
    X[11] = 0.0
    fast, slow = cls(7, **params), cls(7, **params)
    for x, v in zip(X, y, strict=True):
        with np.errstate(all="ignore"):
            ra, rb = fast.learn(x, v), Learner.learn(slow, x, v)
        assert (ra.prediction, ra.loss, ra.diagnostics, ra.scores) == (
            rb.prediction,
            rb.loss,
            rb.diagnostics,
            rb.scores,
        ) or np.isnan(ra.loss)
        assert_states_equal(fast.state(), slow.state())


@pytest.mark.parametrize(
    "bad",
    [np.array([1.0, np.nan, 2.0]), np.array([np.inf, 1e200, 0.0]), np.array([-np.inf, 1.0, 1.0])],
)
def test_pa_learn_rejects_like_base(bad: np.ndarray) -> None:
    m = learners.REGISTRY["pa"](3)
    with pytest.raises(ValueError, match="x must contain only finite numbers"):
        m.learn(bad, 1.0)
    with pytest.raises(ValueError, match="y must be finite"):
        m.learn(np.ones(3), float("nan"))
    assert m.t_ == 0 and not m.w_.any()


def test_check_x_huge_finite_passes_under_errstate_raise() -> None:
    # x.x overflows, so the element-wise check decides; validation itself never raises
    # FloatingPointError (np.vdot does not report to errstate)
    m = learners.REGISTRY["ogd"](3)
    x = np.array([1e300, -1e300, 1.0])
    with np.errstate(all="raise"):
        assert m._check_x(x) is x


@pytest.mark.parametrize("kind", ["dvaw", "vaw", "rls", "dvaw-ensemble"])
def test_double_buffers_leave_state_when_a_step_raises(kind: str) -> None:
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(4, 40, 0)
    a, b = cls(4), cls(4)
    for x, v in zip(X[:20], y[:20], strict=True):
        a.learn(x, v)
        b.learn(x, v)
    before = a.state()
    big = np.full(4, 1e200)
    with np.errstate(all="raise"), pytest.raises(FloatingPointError):
        a.learn(big, 1e300)
    if kind != "dvaw-ensemble":  # the ensemble's meta-state moves before its experts
        assert_states_equal(before, a.state())
        for x, v in zip(X[20:], y[20:], strict=True):
            assert a.learn(x, v).prediction == b.learn(x, v).prediction
        assert_states_equal(a.state(), b.state())


def test_commit_with_buffers_equals_fresh_arrays_and_keeps_input() -> None:
    m = learners.REGISTRY["dvaw"](5, gamma=0.9)
    X, y = learners.REGISTRY["dvaw"]._test_stream(5, 30, 1)
    for x, v in zip(X[:29], y[:29], strict=True):
        m.learn(x, v)
    s = stack_attrs(m)
    copies = [a.copy() for a in s]
    from learners.dvaw import begin

    b = begin(m.P_, m.v_, X[29], m._gamma)
    plain = commit(s, b, X[29], y[29], m._gamma, m._log_gamma)
    spare = spare_for(m)
    assert spare.P is not m.P_ and spare.Sigma is not m.Sigma_
    buffered = commit(s, b, X[29], y[29], m._gamma, m._log_gamma, spare)
    assert buffered.P is spare.P and buffered.Sigma is spare.Sigma
    for p, q in zip(plain, buffered, strict=True):
        assert p.tobytes() == q.tobytes()
    for a, c in zip(s, copies, strict=True):
        assert a.tobytes() == c.tobytes()


def test_symmetrisation_still_runs_past_the_half_overflow() -> None:
    # |p| >= 2^1023 somewhere: x.x of P is inf, the exact max/min test decides and the old
    # symmetrisation runs (0.5 (p + p) overflows to inf, as the recursion always did)
    m = learners.REGISTRY["dvaw"](2, stabilised=False, gamma=1.0)
    m.P_ = np.array([[[2.0**1023, 0.0], [0.0, 1.0]]])
    x = np.array([0.0, 1.0])
    from learners.dvaw import begin

    b = begin(m.P_, m.v_, x, m._gamma)
    with np.errstate(all="ignore"):
        s = commit(stack_attrs(m), b, x, 1.0, m._gamma, m._log_gamma, spare_for(m))
    assert s.P[0, 0, 0] == np.inf


def test_vdot_is_matmul_bit_for_bit() -> None:
    # pa.learn reuses np.vdot(x, x) as x @ x: both are numpy's BLAS dot for 1-d float64
    rng = np.random.default_rng(4)
    for d in (1, 2, 3, 7, 16, 33, 100, 257):
        a = rng.normal(size=3 * d) * np.exp(5 * rng.normal(size=3 * d))
        a[rng.integers(0, 3 * d, size=max(1, d // 3))] = 0.0
        for x in (a[:d], a[::3], a[d - 1 :: -1] if d > 1 else a[:1]):
            assert np.float64(x @ x).tobytes() == np.float64(np.vdot(x, x)).tobytes()


@pytest.mark.parametrize("params", learners.REGISTRY["pa"]._test_params())
def test_pa_underflow_reports_as_the_base_path(params: dict) -> None:
    # x.x underflows: with errstate(under="raise") learn and learn_many raise where the
    # base path does (they compute x @ x then), and learn nothing
    cls = learners.REGISTRY["pa"]
    x = np.array([1e-200, 1.0, 0.5])
    for call in (
        lambda m: m.learn(x, 5.0),
        lambda m: Learner.learn(m, x, 5.0),
        lambda m: m.learn_many(x[None, :], [0.0]),
    ):
        m = cls(3, **params)
        with np.errstate(under="raise"), pytest.raises(FloatingPointError):
            call(m)
        assert m.t_ == 0 and not m.w_.any()
    with np.errstate(under="ignore"):
        assert learners.base.quiet_underflow()
    with np.errstate(under="warn"):
        assert not learners.base.quiet_underflow()


@pytest.mark.parametrize("params", learners.REGISTRY["pa"]._test_params())
def test_pa_warnings_as_the_base_path(params: dict, numpy_path: None) -> None:
    # overflowing (finite) rows: learn and learn_many warn exactly as the base path does
    # (the numpy code; the compiled kernels never warn, docs/design.md "Compiled kernels")
    import warnings

    cls = learners.REGISTRY["pa"]
    X = np.array([[1.0, 2.0, 0.5], [1e200, 1e200, 1.0], [1e-200, 3.0, 1.0], [2.0, -1e160, 1.0]])
    y = [1.0, 2.0, 1e300, -1.0]

    def run(step):  # -> (reports, warning messages)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = step()
        return [(r.prediction, r.loss, r.diagnostics) for r in out], [
            str(w.message) for w in caught
        ]

    a, b, c = cls(3, **params), cls(3, **params), cls(3, **params)
    fast = run(lambda: [a.learn(x, v) for x, v in zip(X, y, strict=True)])
    base = run(lambda: [Learner.learn(b, x, v) for x, v in zip(X, y, strict=True)])
    many = run(lambda: c.learn_many(X, y))
    assert repr(fast) == repr(base)
    assert repr(many) == repr(base)
    assert base[1]  # the stream does warn
    assert_states_equal(a.state(), b.state())
    assert_states_equal(c.state(), b.state())


@pytest.mark.parametrize("kind", ["dvaw", "vaw", "rls", "dvaw-ensemble", "dvaw-sa"])
def test_unbuffered_large_stacks_give_the_same_bits(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # above MAX_SPARE_BYTES a step allocates fresh arrays (no idle spare set kept)
    import learners.dvaw as dvaw_module

    cls = learners.REGISTRY[kind]
    params = cls._test_params()[0]
    X, y = cls._test_stream(4, 80, 2)
    buffered = cls(4, **params)
    buffered.learn_many(X, y)
    monkeypatch.setattr(dvaw_module, "MAX_SPARE_BYTES", 0)
    plain = cls(4, **params)
    plain.learn_many(X, y)
    assert "_bufs" not in vars(plain) and "_bufs" in vars(buffered)
    assert_states_equal(buffered.state(), plain.state())


@pytest.mark.parametrize("kind", ["dvaw", "vaw", "rls", "dvaw-ensemble", "dvaw-sa"])
def test_buffers_never_write_an_array_someone_holds(kind: str) -> None:
    # an old P_/Sigma_ a caller kept, and a shallow copy of the learner, stay intact: a
    # spare buffer anything else refers to is replaced, not written
    import copy

    cls = learners.REGISTRY[kind]
    params = cls._test_params()[0]
    X, y = cls._test_stream(4, 60, 5)
    m, ref = cls(4, **params), cls(4, **params)
    m.learn_many(X[:10], y[:10])
    ref.learn_many(X[:10], y[:10])
    held_P, held_S = m.P_, m.Sigma_
    kept_P, kept_S = held_P.copy(), held_S.copy()
    twin = copy.copy(m)  # shares every array with m
    twin_ref = cls.from_state(m.state())
    for i in range(10, 60):  # interleaved, different labels
        m.learn(X[i], y[i])
        ref.learn(X[i], y[i])
        twin.learn(X[i], -y[i])
        twin_ref.learn(X[i], -y[i])
    assert held_P.tobytes() == kept_P.tobytes() and held_S.tobytes() == kept_S.tobytes()
    assert_states_equal(m.state(), ref.state())
    if kind != "dvaw-sa":  # dvaw-sa writes logw_/start_ in place: shallow copies share those
        assert_states_equal(twin.state(), twin_ref.state())
