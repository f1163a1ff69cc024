"""Online learners: pure numpy, no I/O.

``REGISTRY`` maps each learner's ``kind`` to its class; every learner is built as
``REGISTRY[kind](dim, **params)``. Every public module of this package (and of its
subpackages) is imported here, so a new algorithm registers itself by defining a
``Learner`` subclass with a ``kind``. Not imported: private (``_``) and test modules, the
infrastructure below, and a family's ``offline`` subpackage (references for tests and
reproductions, e.g. ``learners/transductive/offline/``), which the service never needs.
"""

from __future__ import annotations

import importlib
import pkgutil

from learners.base import REGISTRY, BatchInterrupted, Learner, Prediction, StateSize, StepReport
from learners.codec import decode_state, encode_state
from learners.preprocess import Preprocessed, PreprocessOptions, is_preprocessed_state, wrap

_INFRA = {"base", "codec", "checks", "streams", "preprocess"}
#: a family's subpackage of offline references: neither it nor anything in it is imported.
_OFFLINE = "offline"


def _import_all(path: list[str] = __path__, prefix: str = f"{__name__}.") -> None:
    # pkgutil.walk_packages would import every subpackage to walk it, ``offline`` included.
    for info in pkgutil.iter_modules(path, prefix):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf.startswith(("_", "test")) or leaf in _INFRA or leaf == _OFFLINE:
            continue
        module = importlib.import_module(info.name)
        if info.ispkg:
            _import_all(list(module.__path__), f"{info.name}.")


_import_all()


def _learner_class(kind: str) -> type[Learner]:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise ValueError(
            f"unknown learner kind {kind!r}; known kinds: {', '.join(sorted(REGISTRY))}"
        ) from None


def build(kind: str, dim: int, preprocess: object = None, **params: object) -> Learner:
    """Build a learner from its spec, behind the ``preprocess`` options when they switch a
    step on (``learners/preprocess.py``); ``ValueError`` on an unknown kind, a bad
    parameter, a bad option or a step the kind refuses."""
    cls = _learner_class(kind)
    cls._check_param_names(params)
    return wrap(cls, dim, preprocess, params)


def state_size(
    kind: str, dim: int, params: dict[str, object] | None = None, preprocess: object = None
) -> StateSize:
    """``Learner.state_size`` of the learner ``build(kind, dim, preprocess, **params)`` would
    make, without making it; a bad spec raises ``build``'s ``ValueError``."""
    cls = _learner_class(kind)
    options = PreprocessOptions.parse(preprocess)
    if not options:
        return cls.state_size(dim, params)
    cls._check_param_names(params or {})
    return options.state_size(cls, dim, params or {})


def load_state(state: dict) -> Learner:  # type: ignore[type-arg]
    """Rebuild any learner ``build`` makes (preprocessed or not) from its ``state()``."""
    if is_preprocessed_state(state):
        return Preprocessed.from_state(state)
    return Learner.from_state(state)


def load_kernels() -> bool:
    """Import the compiled kernels now (numba's import, about half a second) so that a
    process's first learned event does not wait for it; each kernel's compiled code is
    then read from numba's disk cache on its first call. False when the compiled path is
    off (``ONLINEPREDICT_KERNELS=0``) or numba is not installed."""
    from learners import _accel

    return _accel.get() is not None


__all__ = [
    "REGISTRY",
    "BatchInterrupted",
    "Learner",
    "Prediction",
    "PreprocessOptions",
    "Preprocessed",
    "StateSize",
    "StepReport",
    "build",
    "decode_state",
    "encode_state",
    "load_kernels",
    "load_state",
    "state_size",
]
