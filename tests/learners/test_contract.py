"""One contract, every learner: REGISTRY x checks (River's ``test_estimators`` pattern)."""

from __future__ import annotations

import pytest

from learners import REGISTRY
from learners.checks import yield_checks

CASES = [
    pytest.param(cls, params, check, id=f"{kind}[{i}]:{check.__name__}")
    for kind, cls in sorted(REGISTRY.items())
    for i, params in enumerate(cls._test_params())
    for check in yield_checks(cls)
]


@pytest.mark.parametrize(("cls", "params", "check"), CASES)
def test_contract(cls, params, check) -> None:  # type: ignore[no-untyped-def]
    check(cls, params)


def test_registry_is_not_empty() -> None:
    assert "pa" in REGISTRY
