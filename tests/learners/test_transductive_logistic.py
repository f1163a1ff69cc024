"""The ``transductive-logistic`` kind (``docs/algorithms/transductive.md``): its MALA
estimate of the Bayes mixture against exact quadrature in d = 1, and the block flow."""

from __future__ import annotations

import numpy as np
import pytest

from learners.transductive.logistic import TransductiveLogistic
from learners.transductive.offline.slab_1d import tg_logistic_1d


def e3_logit5(T: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=T)
    u = rng.random(T)
    return 1e-3 * z, np.where(u < 1 / (1 + np.exp(-5 * z)), 1.0, -1.0)


def test_mala_matches_exact_quadrature_in_one_dimension() -> None:
    x, y = e3_logit5(20, 0)  # design scale 1e-3: the prior is built from it
    exact = np.exp(tg_logistic_1d(x, y)[:, 0])
    model = TransductiveLogistic(1, samples=1000, burn_in=50, seed=1)
    model.register(x[:, None])
    z_scores = []
    for xi, yi, p in zip(x, y, exact, strict=True):
        rep = model.learn([xi], yi)
        assert rep.diagnostics["mc_stderr"] < 0.02
        z_scores.append((rep.diagnostics["p_plus"] - p) / rep.diagnostics["mc_stderr"])
        assert rep.scores is not None
        margin = rep.scores["margin"]
        assert margin == pytest.approx(
            np.log(rep.diagnostics["p_plus"] / (1 - rep.diagnostics["p_plus"])), abs=1e-9
        )
    assert np.max(np.abs(z_scores)) <= 4.5
    assert 0.4 <= model.accept_ <= 0.8


def test_block_flow_and_labels() -> None:
    X = np.random.default_rng(2).normal(size=(10, 3))
    model = TransductiveLogistic(3, samples=10, burn_in=0)
    with pytest.raises(ValueError, match="register"):
        model.predict(X[0])
    summary = model.register(X)
    assert summary["T"] == 10 and summary["lam"] == pytest.approx(0.1)
    rep = model.learn(X[0], 0)  # 0/1 labels are accepted
    assert rep.diagnostics["block_remaining"] == 9.0
    assert model.labels_[model.remaining_ == 0].tolist() == [-1.0]
    with pytest.raises(ValueError, match="not in the registered block"):
        model.learn(X[0], 1)
    with pytest.raises(ValueError, match="transductive-logistic"):
        model.register(np.full((2, 3), np.nan))
