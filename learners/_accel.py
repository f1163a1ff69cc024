"""Whether the learners run their compiled kernels (:mod:`learners._kernels`, numba) or
their numpy code (docs/design.md, "Compiled kernels").

numba is optional (the ``fast`` extra). Without it, or with ``ONLINEPREDICT_KERNELS=0``,
or while numpy's errstate raises (so ``np.errstate(over="raise")`` still raises where it
did), the learners run their numpy code. The compiled path does the same
arithmetic per element; only the sums (P x, x^T P x, v^T x, w.x, the refresh's Cholesky
factor) add in a fixed order of their own instead of BLAS/LAPACK's, so its last bits can
differ from the numpy path's (not AROW's full or "prec" shrink, which have no sum). It never
raises on overflow: like the numpy path under the default errstate it leaves the inf/NaN
in the state, which the stabilised guard and the worker's finiteness check
(service/worker/undo.py) see as before.

Compiled code is cached on disk (``cache=True``: next to ``_kernels.py``, or under
``NUMBA_CACHE_DIR`` where the package is read-only); :func:`warm` compiles every kernel
once (the Docker image does this at build time).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from learners._errstate import errstate_check

#: [the kernels module, or None when numba is not installed], once looked up
_loaded: list[Any] = []
#: set by :func:`use` (tests): None follows the environment
_forced: list[bool | None] = [None]

_SILENT = ("ignore", "warn")

#: True while numpy's errstate only ignores or warns (its default: warn, underflow ignored):
#: the compiled path never raises, so any errstate that raises or calls a handler
#: (``np.errstate(over="raise")``) runs the numpy code, which raises as before.
quiet_errstate = errstate_check(
    lambda d: all(d.get(k) in _SILENT for k in ("divide", "over", "under", "invalid"))
)


def use(enabled: bool | None) -> None:
    """Force the compiled path on (True; numba must be installed) or off (False), or back
    to the default (None: on when numba imports and ``ONLINEPREDICT_KERNELS`` is not 0,
    read now)."""
    _forced[0] = enabled
    _active.clear()


def available() -> bool:
    """Whether numba imports (compiling nothing yet)."""
    return _load() is not None


#: [the kernels in use or None], resolved from use() / the environment on first get()
_active: list[Any] = []


def enabled() -> bool:
    """Whether the compiled path is on (numba installed, not switched off by :func:`use`
    or ``ONLINEPREDICT_KERNELS=0``), whatever numpy's errstate: the one switch for the
    service's compiled code too (the ids' BLAKE2b, ``service/store/seen.py``)."""
    if not _active:
        _active.append(_resolve())
    return _active[0] is not None


def get() -> Any:
    """The kernels if the compiled path is on and numpy's errstate raises nothing, else
    None (the caller runs its numpy code)."""
    if not enabled():
        return None
    return _active[0] if quiet_errstate() else None


def _resolve() -> Any:
    forced = _forced[0]
    if forced is False or (forced is None and os.environ.get("ONLINEPREDICT_KERNELS") == "0"):
        return None
    k = _load()
    if k is None and forced:
        raise RuntimeError("compiled kernels forced on, but numba is not installed")
    return k


def _load() -> Any:
    if not _loaded:
        try:
            from learners import _kernels  # imports numba, the optional accelerator
        except ImportError:
            _loaded.append(None)
        else:
            _loaded.append(_kernels)
    return _loaded[0]


def warm() -> None:
    """Compile every kernel for the learners' array types, or load it from the cache
    (``python -c "from learners._accel import warm; warm()"``; the Docker image's build)."""
    if _load() is None:
        raise RuntimeError("numba is not installed: no compiled kernels")
    from learners import REGISTRY

    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3))
    for kind, params, y in (
        ("dvaw", {"refresh": 2}, 1.0),
        ("rls", {}, 1.0),
        ("dvaw-ensemble", {}, 1.0),
        ("dvaw-sa", {}, 1.0),
        ("vaw", {}, 1.0),
        ("pa", {}, 1.0),
        ("ogd", {}, 1.0),
        ("arow", {}, 1),
        ("arow", {"diagonal": "cov"}, 1),
        ("arow", {"diagonal": "prec", "classes": [-1, 1]}, 1),
        ("arow-regression", {}, 1.0),
        ("arow-regression", {"diagonal": "prec", "epsilon": 0.1}, 1.0),
        ("nemsis", {}, 1),
        ("scan", {"s0": 1, "level_min": 1}, 1),
    ):
        m = REGISTRY[kind](3, **params)
        for x in X:
            m.learn(x, y)
        m.learn_many(X, [y] * len(X))
        m.predict(X[0])
        m.predict_many(X)
    kernels = _load()
    kernels.outer_sums(np.zeros((3, 3)), np.zeros(3), X, np.ones(len(X)))  # regret's sums
    kernels.square_sums(np.ones(3), np.zeros(3), 0.0, 0.0)
