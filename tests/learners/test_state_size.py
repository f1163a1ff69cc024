"""Every learner's declared state size (``Learner.state_size``) against the arrays it holds.

For every registered kind, each of its ``_test_params()`` configurations and each dim in
``DIMS``, the declaration is computed first (nothing built), then the learner is built,
prepared as the contract test prepares it (``_test_prepare``: the transductive kinds
register their block there) and fed ``N`` events of its ``_test_stream``. Then:

* the declaration is an upper bound: declared bytes >= the sum of ``.nbytes`` over the
  numpy arrays of ``state()``, fresh and after the stream (arrays may grow in between);
* it is not loose: at the largest dim tested the arrays fill at least ``1 / SLACK`` of it.

``SLACK`` is 1.25, not the 4 a loose bound would need: every declaration is the exact sum
of its arrays' shapes except the transductive kinds', which count the block's rank r as
min(T, d) (the test block's rank is one less: its zero row adds nothing). Scalars in the
state (counters, seeds) are not declared, so they cannot make the check fail. For a
transductive kind ``state_size`` is the bound for the largest block ``register``
accepts, unless told the block; the tightness check tells it the block registered.
A declaration that is too small or too loose fails (see the last two tests).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from learners import REGISTRY, Learner, StateSize, build, state_size
from learners.checks import DIM
from learners.dvaw_ensemble import expert_grid, grid_size
from learners.transductive.block import BlockMixin

DIMS = (1, 3, DIM, 17, 64)  # DIM: the configurations with per-feature lists fit only there
N = 30  # events streamed
SLACK = 1.25

CASES = [
    pytest.param(cls, params, id=f"{kind}[{i}]")
    for kind, cls in sorted(REGISTRY.items())
    for i, params in enumerate(cls._test_params())
]


def array_bytes(learner: Learner) -> int:
    return sum(v.nbytes for v in learner.state().values() if isinstance(v, np.ndarray))


def declared(cls: type[Learner], dim: int, params: dict[str, Any], learner: Learner) -> int:
    """The declaration for what ``learner`` holds: a transductive one is told its block."""
    if isinstance(learner, BlockMixin):
        return cls.state_size(dim, params, block=learner.block_.shape[0]).bytes  # type: ignore[call-arg]
    return cls.state_size(dim, params).bytes


def check_declaration(cls: type[Learner], params: dict[str, Any]) -> None:
    """The two checks of the module docstring; ``AssertionError`` names the case."""
    ran: list[tuple[int, int, int]] = []  # (dim, declared, actual)
    for dim in [d for d in DIMS if d <= cls.max_dim]:
        bound = cls.state_size(dim, params)  # before anything exists
        try:
            learner = cls(dim, **params)
        except ValueError:
            if dim == DIM:  # every configuration fits the contract test's dim
                raise
            continue  # a per-feature list (apas rho, groups) made for DIM features
        X, y = cls._test_stream(dim, N, 0)
        fresh = array_bytes(learner)
        assert fresh <= bound.bytes, f"d={dim}: fresh {fresh} bytes > declared {bound}"
        learner._test_prepare(X)
        learner.learn_many(X, y)
        actual = array_bytes(learner)
        assert actual <= bound.bytes, f"d={dim}: {actual} bytes > declared {bound}"
        told = declared(cls, dim, params, learner)
        assert actual <= told, f"d={dim}: {actual} bytes > declared {told} for this block"
        ran.append((dim, told, actual))
    assert ran, "no dim could build this configuration"
    dim, told, actual = ran[-1]
    assert actual * SLACK >= told, f"d={dim}: declared {told} bytes, only {actual} held"


@pytest.mark.parametrize(("cls", "params"), CASES)
def test_declared_state_size_bounds_the_learned_arrays_tightly(
    cls: type[Learner], params: dict[str, Any]
) -> None:
    check_declaration(cls, params)


def test_formula_reads_as_the_figure() -> None:
    vaw = state_size("vaw", 100_000)
    assert vaw == StateSize(16 * 10**10 + 16 * 10**5 + 16, "16*d^2 + 16*d + 16 bytes")
    ens = state_size("dvaw-ensemble", 10, {"horizon": 1000})
    G = len(expert_grid(10, 1000))
    assert ens.formula == f"16*G*d^2 + 16*G*d + 32*G + 16 bytes (G = {G} discounts)"
    assert ens.bytes == 16 * G * 100 + 16 * G * 10 + 32 * G + 16
    assert state_size("arow", 4, {"classes": ["a", "b", "c"]}).formula == (
        "8*k*d^2 + 8*k*d bytes (k = 3 classes)"
    )
    assert state_size("nemsis", 7).formula == "16*d + 24*window + 128 bytes (window = 1000)"


@pytest.mark.parametrize(
    ("kind", "dim", "params"),
    [
        ("no-such-kind", 3, {}),
        ("vaw", 3, {"bogus": 1}),
        ("vaw", 0, {}),
        ("dvaw-ensemble", 5000, {}),
        ("vaw", 3, {"lam": -1.0}),
        ("dvaw-sa", 3, {"horizon": "long"}),
        ("arow", 5000, {}),  # a full covariance above 4096: use diagonal
    ],
)
def test_a_bad_spec_raises_builds_error(kind: str, dim: int, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as built:
        build(kind, dim, **params)
    with pytest.raises(ValueError) as declared_:
        state_size(kind, dim, params)
    assert str(declared_.value) == str(built.value)


def test_grid_size_is_the_grid_length_and_never_builds_a_huge_grid() -> None:
    for dim in (1, 7, 2000):
        for horizon in (1, 2, 3, 64, 1000, 10**6, 2**62):
            for base in (1.5, 2.0, 3.0, 10.0):
                assert grid_size(dim, horizon, base) == len(expert_grid(dim, horizon, base))
    start = time.perf_counter()
    huge = state_size("dvaw-ensemble", 2000, {"base": 1.0 + 1e-12, "horizon": 2**62})
    assert time.perf_counter() - start < 0.1
    assert huge.bytes > 10**20  # ~4e13 experts: refused by any budget, never built


def test_a_too_small_or_too_loose_declaration_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    vaw = REGISTRY["vaw"]
    monkeypatch.setattr(vaw, "_state_size", classmethod(lambda cls, d, p: StateSize(8 * d, "")))
    with pytest.raises(AssertionError, match="declared"):
        check_declaration(vaw, {})
    monkeypatch.setattr(
        vaw, "_state_size", classmethod(lambda cls, d, p: StateSize(64 * d * d + 16, ""))
    )
    with pytest.raises(AssertionError, match="only"):
        check_declaration(vaw, {})
