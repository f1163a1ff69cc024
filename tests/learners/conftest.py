"""Fixtures choosing the learners' code path (docs/design.md, "Compiled kernels")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from learners import _accel


@pytest.fixture
def numpy_path() -> Iterator[None]:
    """The numpy code, as without numba (for properties of that code: its BLAS bits, its
    warnings)."""
    _accel.use(False)
    yield
    _accel.use(None)


@pytest.fixture
def compiled_path() -> Iterator[None]:
    """The compiled kernels (skips where numba is not installed)."""
    if not _accel.available():
        pytest.skip("numba is not installed")
    _accel.use(True)
    yield
    _accel.use(None)
