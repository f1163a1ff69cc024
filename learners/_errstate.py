"""Whether numpy's errstate in force has some property, read cheaply: numpy >= 2 keeps the
errstate in a context variable whose value is a new object on every change, so each check
remembers the last object that passed and answers with one identity test while the
errstate does not change. On other numpy layouts every check answers False (the callers'
exact, slower path)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:
    from numpy._core._ufunc_config import (  # type: ignore[attr-defined]
        _extobj_contextvar,
        _get_extobj_dict,
    )
except ImportError:  # pragma: no cover - other numpy layouts
    _extobj_contextvar = None


def errstate_check(holds: Callable[[Mapping[str, Any]], bool]) -> Callable[[], bool]:
    """A function answering whether ``holds(numpy's errstate settings)`` for the errstate
    in force."""
    passed: list[Any] = [None]  # the last errstate object that passed (held: no id reuse)

    def check() -> bool:
        if _extobj_contextvar is None:
            return False
        current = _extobj_contextvar.get()
        if current is passed[0]:
            return True
        if holds(_get_extobj_dict()):
            passed[0] = current
            return True
        return False

    return check
