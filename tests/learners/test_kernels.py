"""The compiled kernels (learners/_kernels.py, numba) against the numpy code they stand
for: the same maths to rounding, the contract on both paths, checkpoints that move
between them, and overflow that stays visible (docs/design.md, "Compiled kernels")."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import learners
from learners import _accel
from learners.base import StepReports
from learners.checks import yield_checks
from learners.dvaw import Stack, begin, commit, refresh_inverse, stack_attrs

numba = pytest.importorskip("numba")

#: the kinds whose steps run compiled kernels
KINDS = (
    "pa",
    "ogd",
    "arow",
    "arow-regression",
    "dvaw",
    "vaw",
    "rls",
    "dvaw-ensemble",
    "dvaw-sa",
    "nemsis",
    "scan",
)


def test_the_test_environment_runs_the_compiled_path() -> None:
    # so test_contract.py (and every other learner test) exercises the kernels
    if os.environ.get("ONLINEPREDICT_KERNELS") == "0":
        pytest.skip("ONLINEPREDICT_KERNELS=0: the numpy path on purpose")
    assert _accel.get() is not None


def test_an_errstate_that_raises_runs_the_numpy_code(compiled_path: None) -> None:
    assert _accel.get() is not None
    with np.errstate(all="ignore"):
        assert _accel.get() is not None
    with np.errstate(over="raise"):
        assert _accel.get() is None
    with np.errstate(under="raise"):
        assert _accel.get() is None
    assert _accel.get() is not None


def _cases() -> list:  # type: ignore[type-arg]
    return [
        pytest.param(kind, i, check, id=f"{kind}[{i}]:{check.__name__}")
        for kind in KINDS
        for i, _ in enumerate(learners.REGISTRY[kind]._test_params())
        for check in yield_checks(learners.REGISTRY[kind])
    ]


@pytest.mark.parametrize(("kind", "i", "check"), _cases())
def test_contract_on_the_numpy_path(numpy_path: None, kind: str, i: int, check) -> None:  # type: ignore[no-untyped-def]
    # test_contract.py runs the compiled path; the numpy path keeps the same contract
    cls = learners.REGISTRY[kind]
    check(cls, cls._test_params()[i])


def _run(kind: str, params: dict, d: int, n: int, seed: int) -> tuple[np.ndarray, dict]:  # type: ignore[type-arg]
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(d, n, seed)
    m = cls(d, **params)
    preds = np.array([m.learn(x, v).prediction for x, v in zip(X, y, strict=True)])
    return preds, m.state()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [1, 5, 13])
def test_compiled_equals_numpy_to_rounding(kind: str, d: int) -> None:
    for params in learners.REGISTRY[kind]._test_params():
        _accel.use(False)
        try:
            p_np, s_np = _run(kind, params, d, 300, d)
        finally:
            _accel.use(True)
        try:
            p_c, s_c = _run(kind, params, d, 300, d)
        finally:
            _accel.use(None)
        np.testing.assert_allclose(p_c, p_np, rtol=1e-9, atol=1e-9)
        for name, value in s_np.items():
            if isinstance(value, float) or (
                isinstance(value, np.ndarray) and value.dtype.kind == "f"
            ):
                np.testing.assert_allclose(s_c[name], value, rtol=1e-8, atol=1e-8, err_msg=name)
            else:
                assert np.array_equal(s_c[name], value), name


@pytest.mark.parametrize("kind", KINDS)
def test_compiled_learn_many_equals_loop_bit_for_bit(compiled_path: None, kind: str) -> None:
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(6, 200, 1)
    for params in cls._test_params():
        a, b = cls(6, **params), cls(6, **params)
        loop = [a.learn(x, v) for x, v in zip(X, y, strict=True)]
        many = b.learn_many(X[:70], y[:70]) + b.learn_many(X[70:], y[70:])
        assert repr([(r.prediction, r.loss, r.diagnostics, r.scores) for r in loop]) == repr(
            [(r.prediction, r.loss, r.diagnostics, r.scores) for r in many]
        ), params
        learners.checks.assert_states_equal(a.state(), b.state())


@pytest.mark.parametrize("kind", ["arow", "arow-regression", "nemsis", "scan"])
def test_replays_of_every_form_are_deterministic(compiled_path: None, kind: str) -> None:
    for params in learners.REGISTRY[kind]._test_params():
        a, sa = _run(kind, params, 7, 200, 5)
        b, sb = _run(kind, params, 7, 200, 5)
        assert a.tobytes() == b.tobytes(), params
        learners.checks.assert_states_equal(sa, sb)


@pytest.mark.parametrize("mode", ["cov", "prec"])
def test_diagonal_arow_shrink_matches_numpy(mode: str) -> None:
    # per coordinate the same operations; the "cov" form's others' share is a sum
    rng = np.random.default_rng(4)
    cov = rng.uniform(0.1, 2.0, size=9)
    x = rng.normal(size=9)
    x[[2, 5]] = 0.0  # zero coordinates stay untouched
    sx = cov * x
    v = float(x @ sx)
    _accel.use(False)
    ref = learners.arow.shrink_covariance(cov, x, sx, v, 0.7, mode, 0.3)
    _accel.use(True)
    got = learners.arow.shrink_covariance(cov, x, sx, v, 0.7, mode, 0.3)
    _accel.use(None)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert got[2] == cov[2] and got[5] == cov[5]
    if mode == "prec":
        assert got.tobytes() == ref.tobytes()  # no sum: numpy's bits


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_moves_between_the_paths(kind: str) -> None:
    # a state written on one path continues on the other: the same maths, so the same
    # predictions to rounding (not bit for bit: the sums add in another order)
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(8, 300, 2)
    for first, then in ((False, True), (True, False)):
        _accel.use(first)
        m = cls(8)
        for x, v in zip(X[:150], y[:150], strict=True):
            m.learn(x, v)
        state = m.state()
        same = [m.learn(x, v).prediction for x, v in zip(X[150:], y[150:], strict=True)]
        _accel.use(then)
        moved = cls.from_state(state)
        other = [moved.learn(x, v).prediction for x, v in zip(X[150:], y[150:], strict=True)]
        _accel.use(None)
        np.testing.assert_allclose(other, same, rtol=1e-9, atol=1e-9)


def test_replay_is_deterministic_on_the_compiled_path(compiled_path: None) -> None:
    a, sa = _run("dvaw-ensemble", {}, 7, 200, 5)
    b, sb = _run("dvaw-ensemble", {}, 7, 200, 5)
    assert a.tobytes() == b.tobytes()
    learners.checks.assert_states_equal(sa, sb)


def _overflowing_exact_dvaw() -> tuple[learners.Learner, np.ndarray]:
    # one feature never excited: its P entry grows as gamma^-t and overflows (spec §3.7)
    m = learners.REGISTRY["dvaw"](2, gamma=0.5, stabilised=False)
    return m, np.array([1.0, 0.0])


def test_overflow_stays_visible_on_the_compiled_path(compiled_path: None) -> None:
    m, x = _overflowing_exact_dvaw()
    t = 0
    for t in range(1, 2000):  # noqa: B007 (t is read after the loop)
        m.learn(x, 1.0)
        if not np.isfinite(m.P_).all():
            break
    else:
        pytest.fail("P never overflowed")
    assert t > 1000  # P[1, 1] = 2^t, symmetrised to inf once it reaches 2^1023
    assert m.P_[0, 1, 1] == np.inf  # inf, as the numpy path's overflow leaves it


def test_overflow_step_matches_the_numpy_path() -> None:
    firsts = []
    for on in (False, True):
        _accel.use(on)
        m, x = _overflowing_exact_dvaw()
        with np.errstate(over="ignore", invalid="ignore"):
            t = next(t for t in range(1, 2000) if m.learn(x, 1.0) and not np.isfinite(m.P_).all())
        firsts.append((t, m.P_.tobytes(), m.Sigma_.tobytes()))
    _accel.use(None)
    assert firsts[0] == firsts[1]


def test_errstate_raise_raises_as_before(compiled_path: None) -> None:
    m, x = _overflowing_exact_dvaw()
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        for _ in range(2000):
            m.learn(x, 1.0)


def test_the_guard_refreshes_an_unhealthy_expert(compiled_path: None) -> None:
    m = learners.REGISTRY["dvaw"](3, refresh=10**6)
    rng = np.random.default_rng(0)
    for _ in range(5):
        m.learn(rng.normal(size=3), 1.0)
    m.P_ = m.P_.copy()
    m.P_[0, 1, 1] = -1.0  # a non-positive diagonal fails the guard (spec §3.7 item 1)
    m.learn(rng.normal(size=3), 1.0)
    assert m.refreshes_ == 1
    np.testing.assert_allclose(m.P_[0] @ m.Sigma_[0], np.eye(3), atol=1e-10)


@pytest.mark.parametrize("d", [1, 2, 7, 40, 100])
def test_compiled_refresh_equals_lapack_to_rounding(d: int) -> None:
    rng = np.random.default_rng(d)
    A = rng.normal(size=(3, d, d))
    Sigma = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(d)
    theta = rng.normal(size=(3, d))
    s = Stack(np.zeros((3, d, d)), np.zeros((3, d)), Sigma, theta, np.full(3, 0.1), np.zeros(3))
    idx = np.array([0, 2])
    _accel.use(False)
    ref, _ = refresh_inverse(s, idx, 0.0)
    _accel.use(True)
    got, _ = refresh_inverse(s, idx, 0.0)
    _accel.use(None)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    assert (got.P[1] == 0.0).all()  # untouched experts stay as they were
    assert (got.P[0] == got.P[0].T).all()


@pytest.mark.parametrize("kind", ["dvaw", "rls", "dvaw-ensemble"])
def test_compiled_commit_gives_the_numpy_commits_bits(kind: str) -> None:
    # commit has no sum: from the same Begin both paths do the same IEEE operations per
    # entry, 1/gamma's multiplication included (dvaw.discount)
    d = 9
    m = learners.REGISTRY[kind](d)
    X, y = type(m)._test_stream(d, 40, 3)
    for x, v in zip(X, y, strict=True):
        m.learn(x, v)
    s, x, y0 = stack_attrs(m), np.asarray(X[-1], dtype=float), 0.7
    outs = []
    for on in (False, True):
        _accel.use(on)
        try:
            b = begin(s.P, s.v, x, m._gamma) if not on else outs[0][1]
            outs.append((commit(s, b, x, y0, m._gamma, m._log_gamma), b))
        finally:
            _accel.use(None)
    (ref, _), (got, _) = outs
    assert not np.all(m._gamma == 1.0)
    for name, a, b in zip(Stack._fields, got, ref, strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name


def test_an_indefinite_sigma_takes_the_eigen_fallback(compiled_path: None) -> None:
    m = learners.REGISTRY["dvaw"](2)
    s = stack_attrs(m)
    bad = s._replace(Sigma=np.array([[[1.0, 2.0], [2.0, 1.0]]]))  # eigenvalues 3 and -1
    got, _ = refresh_inverse(bad, np.array([0]), 1e-6)
    assert np.isfinite(got.P).all() and math.isfinite(got.logdet[0])


@pytest.mark.parametrize("params", learners.REGISTRY["pa"]._test_params())
def test_pa_learn_many_equals_loop_for_every_batch_form(compiled_path: None, params) -> None:  # type: ignore[no-untyped-def]
    cls = learners.REGISTRY["pa"]
    X, y = cls._test_stream(5, 120, 7)
    X[3] *= 1e200  # overflowing rows: the same non-finite values either way
    loop = cls(5, **params)
    expected = [loop.learn(x, v) for x, v in zip(X, y, strict=True)]
    strided = np.zeros((2 * len(X), 5))
    strided[::2] = X
    for rows in (X, X.tolist(), np.asfortranarray(X), list(X), strided[::2]):
        m = cls(5, **params)
        first, second = m.learn_many(rows[:60], y[:60]), m.learn_many(rows[60:], y[60:])
        got = first + second
        assert repr([(r.prediction, r.loss, r.diagnostics, r.scores) for r in got]) == repr(
            [(r.prediction, r.loss, r.diagnostics, r.scores) for r in expected]
        )
        # the columns a batch's consumers read instead of the reports
        assert isinstance(first, StepReports)
        assert repr(first.predictions + second.predictions) == repr(
            [r.prediction for r in expected]
        )
        assert repr(first.losses + second.losses) == repr([r.loss for r in expected])
        assert first[-1] == expected[59] and first[:2] == expected[:2]
        learners.checks.assert_states_equal(m.state(), loop.state())


@pytest.mark.parametrize("kind", ["arow", "arow-regression"])
def test_arow_compiled_shrink_is_bit_identical(kind: str) -> None:
    # the compiled confidence step does numpy's operations element by element: same bits
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(9, 200, 3)
    states = []
    for on in (False, True):
        _accel.use(on)
        m = cls(9)
        reports = [m.learn(x, v) for x, v in zip(X, y, strict=True)]
        states.append((m.state(), repr([(r.prediction, r.diagnostics) for r in reports])))
    _accel.use(None)
    learners.checks.assert_states_equal(states[0][0], states[1][0])
    assert states[0][1] == states[1][1]
