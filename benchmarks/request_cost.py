"""The predict cost per row that ``service/api/cost.py``'s model estimates, measured.

For each kind and dimension: a learner built from the registry, taught a short seeded
stream, then ``predict_many`` over ``--rows`` rows timed by process CPU time (the least
of ``--reps``); beside it the model's estimate (``row_cost``, in units of ~1 ns). The
model should err on the high side: ``ratio`` = estimate / measured >= 1 for the kinds
that dominate a request's cost.

    python benchmarks/request_cost.py [--dims 20 100] [--rows 200] [--reps 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/learners.py would shadow the ``learners`` package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from learners import REGISTRY  # noqa: E402
from service.api.cost import row_cost  # noqa: E402

KINDS = ("pa", "vaw", "dvaw", "rls", "dvaw-ensemble", "dvaw-sa", "arow", "transductive-logistic")


def measure(kind: str, dim: int, rows: int, reps: int) -> float | None:
    """Seconds of CPU per row of ``predict_many``, or None where the kind cannot be built
    bare at this dimension."""
    rng = np.random.default_rng(0)
    try:
        learner = REGISTRY[kind](dim)
    except (TypeError, ValueError):
        return None
    X = rng.normal(size=(max(rows, 64), dim))
    classifier = getattr(learner, "task", "regression") == "classification"
    y = np.where(X[:, 0] > 0, 1, -1) if classifier else X @ rng.normal(size=dim)
    try:
        learner.learn_many(X[:64], y[:64])
    except (TypeError, ValueError):
        return None  # e.g. a transductive learner that needs a block registered first
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        learner.predict_many(X[:rows])
        best = min(best, time.process_time() - start)
    return best / rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(f"{'kind':24s} {'dim':>5s} {'measured us/row':>16s} {'estimate us/row':>16s} ratio")
    for kind in KINDS:
        for dim in args.dims:
            seconds = measure(kind, dim, args.rows, args.reps)
            estimate = row_cost(kind, dim) / 1e3  # units of ~1 ns -> us
            if seconds is None:
                print(f"{kind:24s} {dim:5d} {'n/a':>16s} {estimate:16.1f}")
                continue
            us = seconds * 1e6
            print(f"{kind:24s} {dim:5d} {us:16.1f} {estimate:16.1f} {estimate / us:5.1f}")


if __name__ == "__main__":
    main()
