"""Exponential weights with transductive priors (Qian, Rakhlin, Zhivotovskiy, arXiv
2410.21621; ``docs/algorithms/transductive.md``).

The learners are kinds ``transductive`` (:class:`TransductiveRegressor`, squared loss, in
``regressor``) and ``transductive-logistic`` (:class:`TransductiveLogistic`, in
``logistic``). What they are built from: ``block`` (the registered block of design vectors,
a mixin), ``whitening`` (the coordinates in which the block's Gram matrix is the identity),
``sparse_prior`` (the Student-t prior of ``mode="sparse"`` and its Gibbs sampler) and
``mala`` (the Langevin sampler of the logistic mixture).

``offline`` holds the references the tests and ``benchmarks/transductive/run.py`` compare
against (closed-form forecasters, the exact slab aggregates for d = 1, the Laplace and
importance-sampling routes of the sparse prior). No registered learner uses them and
``learners`` does not import them, so the service never loads them.
"""

from __future__ import annotations

from learners.transductive.logistic import TransductiveLogistic
from learners.transductive.regressor import TransductiveRegressor

__all__ = ["TransductiveLogistic", "TransductiveRegressor"]
