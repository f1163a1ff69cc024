"""Offline references of the transductive family: for tests and reproductions only.

``closed_form`` (the VAW / ridge forecasters with any regulariser, the online-to-batch
predictor, the regret comparator and the Theorem 1 bound), ``slab_1d`` (the exact Bayes
mixture and slab-expert aggregates in one dimension) and ``sparse_approximations`` (the
Laplace and importance-sampling routes of the sparse prior). No registered learner imports
them, and ``learners`` never walks into this package, so the service does not load them.
"""
