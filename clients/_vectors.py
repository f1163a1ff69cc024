"""Turn numpy arrays, pandas objects, mappings and sequences into JSON-ready feature vectors.

A vector goes on the wire as a list of floats, or as an object ``{name: value}`` for a model
created with ``features`` (docs/events.md §1; missing names are 0). Named inputs keep their
names: a dict, a pandas Series whose index holds strings (a row), a DataFrame whose columns
do (a batch). Unnamed ones (lists, arrays, pandas objects with integer labels, such as a
frame built from an array) become lists, as before. pandas is never imported: it is
recognised by its attributes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Vector = list[float] | dict[str, float]


def _tolist(obj: Any) -> Any:
    # pandas and numpy both offer to_numpy()/tolist(); duck-typing keeps them optional imports.
    if hasattr(obj, "to_numpy"):
        obj = obj.to_numpy()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj


def _finite(v: Any) -> float:
    f = float(v)
    if not math.isfinite(f):  # JSON cannot carry NaN/inf; the server would refuse them
        raise ValueError(f"feature vector contains {f}")
    return f


def _names(labels: Any) -> list[str] | None:
    """A pandas index's labels when they are all strings (feature names), else None."""
    names = list(labels)
    return names if names and all(isinstance(n, str) for n in names) else None


def _named(x: Mapping[Any, Any]) -> dict[str, float]:
    out = {}
    for name, v in x.items():
        if not isinstance(name, str):
            raise ValueError(f"feature names must be strings, got {name!r}")
        out[name] = _finite(v.item() if hasattr(v, "item") else v)
    return out


def as_vector(x: Any) -> Vector:
    """One feature vector: a list of floats, or ``{name: value}`` for named input.

    Accepts a list/tuple, a 1-d numpy array, a dict of names to numbers, a pandas Series
    (named by its index when that holds strings), or a one-row 2-d array/DataFrame.

    Examples
    --------
    >>> import numpy as np
    >>> as_vector(np.array([1, 2.5]))
    [1.0, 2.5]
    >>> as_vector({"a": np.float32(0.5)})
    {'a': 0.5}
    """
    if isinstance(x, Mapping):
        return _named(x)
    if getattr(x, "ndim", None) == 1 and hasattr(x, "index") and hasattr(x, "to_numpy"):
        names = _names(x.index)  # a pandas Series: a row
        if names is not None:
            return _named(dict(zip(names, x.to_numpy().tolist(), strict=True)))
    if getattr(x, "ndim", None) == 2 and hasattr(x, "columns") and len(x) == 1:
        return as_matrix(x)[0]  # a one-row DataFrame
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
        out.append(_finite(v))
    return out


def as_matrix(X: Any) -> list[Vector]:
    """A batch of feature vectors (2-d array, DataFrame, rows, dicts); a DataFrame whose
    columns are strings gives one ``{name: value}`` per row.

    Examples
    --------
    >>> as_matrix([[1, 2], (3, 4)])
    [[1.0, 2.0], [3.0, 4.0]]
    >>> as_matrix([{"a": 1}, [0, 1]])
    [{'a': 1.0}, [0.0, 1.0]]
    """
    if getattr(X, "ndim", None) == 2 and hasattr(X, "columns") and hasattr(X, "to_numpy"):
        names = _names(X.columns)  # a pandas DataFrame
        if names is not None:
            return [_named(dict(zip(names, row, strict=True))) for row in X.to_numpy().tolist()]
    rows = _tolist(X)
    if isinstance(rows, (int, float)) or not isinstance(rows, Iterable):
        raise ValueError("a batch must be a 2-d array or a sequence of vectors")
    out = []
    for row in rows:
        if isinstance(row, (int, float)):
            raise ValueError("a batch must be 2-dimensional; got a 1-d vector")
        out.append(as_vector(row))
    return out


def numeric_block(X: Any) -> Any:
    """``X`` as a 2-d numeric numpy array when it is one already (a numpy array of
    numbers, or a pandas DataFrame whose columns are not names): what the binary predict
    body carries (docs/events.md §7). None for anything else (lists, named columns,
    objects), which goes as JSON. numpy is not imported: an array is recognised by its
    attributes."""
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):
        if _names(X.columns) is not None:
            return None  # named columns: JSON objects {name: value}
        X = X.to_numpy()
    dtype = getattr(X, "dtype", None)
    if getattr(X, "ndim", None) != 2 or getattr(dtype, "kind", None) not in ("f", "i", "u"):
        return None
    return X if X.shape[0] > 0 and X.shape[1] > 0 else None


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
