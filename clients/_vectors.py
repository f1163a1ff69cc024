"""Turn numpy arrays, pandas objects and sequences into JSON-ready lists of floats."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def _tolist(obj: Any) -> Any:
    # pandas and numpy both offer to_numpy()/tolist(); duck-typing keeps them optional imports.
    if hasattr(obj, "to_numpy"):
        obj = obj.to_numpy()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj


def as_vector(x: Any) -> list[float]:
    """One feature vector as a list of floats.

    Accepts a list/tuple, a 1-d numpy array, a pandas Series, or a one-row 2-d array/DataFrame.

    Examples
    --------
    >>> import numpy as np
    >>> as_vector(np.array([1, 2.5]))
    [1.0, 2.5]
    """
    values = _tolist(x)
    if isinstance(values, (int, float)):
        raise ValueError("a feature vector must be a sequence, not a scalar")
    values = list(values)
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = list(values[0])  # one-row frame or (1, d) array
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            raise ValueError("a feature vector must be 1-dimensional")
        f = float(v)
        if not math.isfinite(f):  # JSON cannot carry NaN/inf; the server would refuse them
            raise ValueError(f"feature vector contains {f}")
        out.append(f)
    return out


def as_matrix(X: Any) -> list[list[float]]:
    """A batch of feature vectors as a list of lists of floats (2-d array, DataFrame, rows).

    Examples
    --------
    >>> as_matrix([[1, 2], (3, 4)])
    [[1.0, 2.0], [3.0, 4.0]]
    """
    rows = _tolist(X)
    if isinstance(rows, (int, float)) or not isinstance(rows, Iterable):
        raise ValueError("a batch must be a 2-d array or a sequence of vectors")
    out = []
    for row in rows:
        if isinstance(row, (int, float)):
            raise ValueError("a batch must be 2-dimensional; got a 1-d vector")
        out.append(as_vector(row))
    return out


def as_label(y: Any) -> float | int | None:
    """A label as JSON: None stays None, booleans map to +1/-1, integral values to int."""
    if y is None:
        return None
    if hasattr(y, "item"):
        y = y.item()  # numpy scalar
    if isinstance(y, bool):
        return 1 if y else -1
    if isinstance(y, int):
        return y
    y = float(y)
    if math.isnan(y):
        return None
    return y


def as_labels(y: Any, n: int) -> list[float | int | None]:
    """Labels for a batch of ``n`` vectors (None means all unlabelled)."""
    if y is None:
        return [None] * n
    values: Sequence[Any] = _tolist(y)
    if len(values) != n:
        raise ValueError(f"got {len(values)} labels for {n} vectors")
    return [as_label(v) for v in values]
