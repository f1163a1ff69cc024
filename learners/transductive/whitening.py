"""Whitening of a registered block: the coordinates of the transductive learners.

:func:`whitening` maps the registered design multiset to coordinates in which its Gram
matrix G_T is the identity on range(G_T) (spec §1.2: "project onto an orthonormal basis of
range(G_T) at registration time"); ``transductive`` (mode "vaw"/"ridge") and
``transductive-logistic`` compute in them. Equations: ``docs/algorithms/transductive.md``.
"""

from __future__ import annotations

import numpy as np


def whitening(X: np.ndarray) -> np.ndarray:
    """The (r, d) matrix W with W G_T W^T = I_r, r = rank(G_T), G_T = X^T X.

    The columns are equilibrated before the SVD so that wildly scaled designs (spec E2:
    column scales 1e-4 .. 1e4) keep their small directions; zero columns stay zero.
    Directions orthogonal to every row never affect a prediction (spec §1.2), so they are
    dropped: ``W @ x`` loses nothing for any x in the span of the rows.
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    if X.shape[0] == 0:
        return np.zeros((0, d))
    scale = np.sqrt(np.einsum("ij,ij->j", X, X))
    scale[scale == 0.0] = 1.0
    _, s, vt = np.linalg.svd(X / scale, full_matrices=False)
    tol = max(X.shape) * np.finfo(np.float64).eps * (s[0] if s.size else 0.0)
    keep = s > tol
    # X / scale = U S V^T  =>  G_T = D V S^2 V^T D, so W = S^-1 V^T D^-1 whitens it.
    return (vt[keep] / s[keep, None]) / scale
