"""Shared pieces of the AROW reproduction: algorithms, grids, tuning, tables.

See ``docs/algorithms/arow.md`` and ``benchmarks/README.md`` ("AROW under label noise").

Every algorithm is built through the learner registry (``learners.build``), so the
benchmark exercises exactly the code the service runs. Protocol (§13.1): each
hyperparameter is tuned on one separate randomised run, then the reported runs use it;
single online pass; training labels flipped with probability ``noise``; test error is
measured against the clean labels.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # runnable as ``python benchmarks/arow/<script>.py``
    sys.path.insert(0, str(ROOT))

from learners import build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "arow"

# §13.1 grids [X] (the paper did not publish its grids)
R_GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0)
C_GRID = (1e-3, 1e-2, 0.1, 1.0, 10.0)
A_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
ETA_GRID = (0.55, 0.65, 0.75, 0.85, 0.95)
TUNING_SEED = 1000


@dataclass(frozen=True)
class Algorithm:
    name: str
    kind: str
    fixed: dict[str, Any]
    param: str | None
    grid: tuple[Any, ...]

    def make(self, dim: int, value: Any) -> Any:
        params = dict(self.fixed)
        if self.param is not None:
            params[self.param] = value
        return build(self.kind, dim, **params)

    def label(self, value: Any) -> str:
        return "–" if self.param is None else f"{self.param}={value:g}"


ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("AROW-full", "arow", {}, "r", R_GRID),
    Algorithm("AROW-diag-cov", "arow", {"diagonal": "cov"}, "r", R_GRID),
    Algorithm("AROW-diag-prec", "arow", {"diagonal": "prec"}, "r", R_GRID),
    Algorithm("CW-full", "cw", {}, "eta", ETA_GRID),
    Algorithm("CW-diag", "cw", {"diagonal": True}, "eta", ETA_GRID),
    Algorithm("PA-II", "pa-classifier", {"variant": "pa2"}, "C", C_GRID),
    Algorithm("PA-I", "pa-classifier", {"variant": "pa1"}, "C", C_GRID),
    Algorithm("Perceptron", "perceptron", {}, None, (None,)),
    Algorithm("SOP-full", "sop", {}, "a", A_GRID),
    Algorithm("SOP-diag", "sop", {"diagonal": True}, "a", A_GRID),
)
BY_NAME = {a.name: a for a in ALGORITHMS}


def flip_labels(y: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Flip each label (-1/+1) independently with probability ``noise`` (§13.1)."""
    flip = rng.random(y.shape[0]) < noise
    return np.where(flip, -y, y)


def test_error(model: Any, X: np.ndarray, y: np.ndarray) -> float:
    pred = np.where(model.decision_function(X) >= 0.0, 1, -1)
    return float(np.mean(pred != y))


def train_and_score(
    algo: Algorithm,
    value: Any,
    X: np.ndarray,
    y_noisy: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    y_clean: np.ndarray | None = None,
    checkpoints: Iterable[int] = (),
) -> dict[str, Any]:
    """One online pass over (X, y_noisy); test error at the end and at each checkpoint, and
    the online mistake rate against the clean training labels (Fig. 2(b)'s measure)."""
    model = algo.make(X.shape[1], value)
    curve: list[float] = []
    preds: list[int] = []
    start = 0
    for stop in [*sorted(checkpoints), X.shape[0]]:
        if stop > start:
            preds += [
                rep.prediction for rep in model.learn_many(X[start:stop], y_noisy[start:stop])
            ]
            start = stop
        if stop < X.shape[0]:
            curve.append(test_error(model, X_test, y_test))
    err = test_error(model, X_test, y_test)
    curve.append(err)
    clean = y_noisy if y_clean is None else y_clean
    online = float(np.mean(np.asarray(preds) != clean))
    return {"error": err, "curve": curve, "online_clean_error": online}


def pick_best(scores: dict[Any, float]) -> Any:
    """Grid value with the lowest error (first one on ties, i.e. the smallest value)."""
    return min(scores, key=lambda k: scores[k])


def single_blas_thread() -> None:
    """One BLAS thread per process: runs are parallel over processes, and threaded BLAS on
    tiny (d x d) products only adds contention (2x slower for SOP here)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def parallel_map(fn: Callable[..., Any], jobs: list[tuple[Any, ...]], workers: int) -> list[Any]:
    if workers <= 1:
        single_blas_thread()
        return [fn(*job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers, initializer=single_blas_thread) as pool:
        return list(pool.map(fn, *zip(*jobs, strict=True), chunksize=max(1, len(jobs) // 64)))


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def study_args(doc: str, runs: int) -> argparse.Namespace:
    """The command line both label-noise studies take: evaluation runs, noise levels and
    worker processes (``doc``'s first line is the description)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--runs", type=int, default=runs, help="evaluation runs (seeds 0..runs-1)")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--workers", type=int, default=default_workers())
    return parser.parse_args()


def mean_sd(values: Iterable[float]) -> tuple[float, float]:
    arr = np.asarray(list(values), dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def mean_ranks(errors: dict[str, list[float]]) -> dict[str, float]:
    """Mean rank (1 = best; ties share the average rank) over problems, as in Table 1."""
    names = list(errors)
    table = np.array([errors[n] for n in names])  # (algorithms, problems)
    ranks = np.zeros_like(table)
    for j in range(table.shape[1]):
        col = table[:, j]
        for i in range(len(names)):
            less, equal = np.sum(col < col[i]), np.sum(col == col[i])
            ranks[i, j] = less + (equal + 1) / 2.0
    return {n: float(ranks[i].mean()) for i, n in enumerate(names)}
