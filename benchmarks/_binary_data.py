"""The binary data sets the held-out benchmarks share (``quantification_app.py``,
``calibration.py``): shipped inside the scikit-learn and river wheels, no download."""

from __future__ import annotations

from typing import Any

import numpy as np

#: a data set: features, and True where the row is of the positive class
Data = tuple[np.ndarray, np.ndarray]


def _river(ds: Any) -> tuple[np.ndarray, list[Any]]:
    rows = list(ds)
    keys = sorted(rows[0][0])
    X = np.array([[r[0][k] for k in keys] for r in rows], dtype=np.float64)
    return X, [r[1] for r in rows]


def load_binary() -> dict[str, Data]:
    """breast_cancer (malignant), digits (odd), river Phishing, Bananas (not linearly
    separable), Yeast (Class2) and ImageSegments (window), in that order."""
    from river import datasets
    from sklearn.datasets import load_breast_cancer, load_digits

    def positive(flags: Any) -> np.ndarray:
        return np.asarray(flags, dtype=bool)

    out: dict[str, Data] = {}
    bc = load_breast_cancer()
    out["breast_cancer"] = (bc.data, positive(bc.target == 0))
    dg = load_digits()
    out["digits odd"] = (dg.data.astype(np.float64), positive(dg.target % 2))
    X, y = _river(datasets.Phishing())
    out["Phishing"] = (X, positive(y))
    X, y = _river(datasets.Bananas())
    out["Bananas"] = (X, positive(y))
    X, y = _river(datasets.Yeast())
    out["Yeast Class2"] = (X, positive([v["Class2"] for v in y]))
    X, y = _river(datasets.ImageSegments())
    out["Segment window"] = (X, positive([v == "window" for v in y]))
    return out


def split(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """Stratified 70/30 split (each label's rows, smallest label first), z-scored with the
    training split's statistics."""
    rng = np.random.default_rng(seed)
    tr, te = [], []
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        k = int(round(0.3 * idx.size))
        te.append(idx[:k])
        tr.append(idx[k:])
    i_tr, i_te = rng.permutation(np.concatenate(tr)), rng.permutation(np.concatenate(te))
    mu, sd = X[i_tr].mean(axis=0), X[i_tr].std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X[i_tr] - mu) / sd, y[i_tr], (X[i_te] - mu) / sd, y[i_te]
