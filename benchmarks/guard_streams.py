"""What the scale guard (service/metrics/guard.py) would refuse of the streams the papers'
reproductions and ``benchmarks/real_streams.py`` measure, were they sent to a worker.

Those benchmarks and the slow tests under tests/learners run the learners directly, not the
worker: the guard cannot move their figures. The question is whether a user who sends the
same streams to the service gets the same models: it does exactly when the guard refuses
none of their rows (a refused row is the only thing the guard changes). Each stream goes
through a fresh ``ScaleGuard`` row by row, in order, with x guarded (every kind but pa and
pa-classifier) and, for regression, y; the table counts the rows it refuses.

Streams: river's bundled ones of real_streams.py (x in its sorted key order, as there) and
of benchmarks/dvaw/real_streams.py (featurised as there); the SP500 2010 panel of the APAS
reproduction (benchmarks/data); the AROW and NEMSIS real-data sets (river's and
scikit-learn's bundles: breast cancer, digits, Shuttle, Yeast; stored order and shuffled);
the synthetic streams of the slow reproduction tests
(dvaw's Gaussian and rank-deficient ones, arow's dense data, apas' index stream) and every
kind's ``_test_stream``.

    python benchmarks/guard_streams.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))

import learners  # noqa: E402
from benchmarks._report import write_text  # noqa: E402
from service.metrics.guard import ScaleGuard  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "guard_streams.md"


def refused(X: np.ndarray, y: list[Any] | None) -> int:
    g = ScaleGuard(X.shape[1], x=True, y=y is not None)
    n = 0
    for i in range(len(X)):
        try:
            g.admit(X[i], None if y is None else y[i])
        except ValueError:
            n += 1
    return n


def river_streams() -> Iterator[tuple[str, np.ndarray, list[Any] | None]]:
    from river import datasets

    from benchmarks.real_streams import CLASSIFICATION, REGRESSION, numeric

    for name in (*REGRESSION, *CLASSIFICATION):
        rows, ys = [], []
        keys: list[str] | None = None
        for x, y in getattr(datasets, name)():
            xs = numeric(x)
            keys = keys or sorted(xs)
            rows.append([xs.get(k, 0.0) for k in keys])
            ys.append(float(y) if name in REGRESSION else None)
        yield (
            f"benchmarks/real_streams.py: {name}",
            np.array(rows),
            (ys if name in REGRESSION else None),
        )


def dvaw_streams() -> Iterator[tuple[str, np.ndarray, list[Any] | None]]:
    from benchmarks.dvaw.real_streams import featurised

    for name in ("TrumpApproval", "WaterFlow", "AirlinePassengers", "ChickWeights"):
        X, y, _ = featurised(name)
        yield (
            f"benchmarks/dvaw/real_streams.py: {name}",
            np.asarray(X, float),
            [float(v) for v in y],
        )


def apas_panel() -> Iterator[tuple[str, np.ndarray, list[Any] | None]]:
    from benchmarks.apas.common import load_sp500_2010

    X, y, _ = load_sp500_2010()
    yield "benchmarks/data/sp500_2010.csv.gz (APAS)", np.asarray(X, float), [float(v) for v in y]


def bundled_classification() -> Iterator[tuple[str, np.ndarray, list[Any] | None]]:
    """The AROW and NEMSIS real-data benchmarks' sets (river and scikit-learn bundles), in
    their stored order and in a seeded shuffle (those benchmarks split them at random)."""
    import importlib

    def load(folder: str) -> Any:  # each folder's scripts import their own ``common``
        sys.path.insert(0, str(ROOT / "benchmarks" / folder))
        sys.modules.pop("common", None)
        try:
            return importlib.import_module(f"benchmarks.{folder}.real")
        finally:
            sys.path.pop(0)

    raw_problem = load("arow").raw_problem
    load_all = load("nemsis").load_all

    sets = {
        f"benchmarks/arow/real.py: {p}": raw_problem(p)[0] for p in ("breast_cancer", "digits-0")
    }
    seen: set[int] = set()  # the Yeast ladder shares one X: once
    for k, (X, _) in load_all().items():
        if id(X) not in seen and not k.startswith("digits"):  # digits: arow's above
            seen.add(id(X))
            sets[f"benchmarks/nemsis/real.py: {k.split('-')[0]}"] = X
    for name, X in sets.items():
        X = np.asarray(X, dtype=float)
        yield name, X, None
        order = np.random.default_rng(0).permutation(len(X))
        yield f"{name} (shuffled)", X[order], None


def synthetic() -> Iterator[tuple[str, np.ndarray, list[Any] | None]]:
    from tests.learners.test_apas import stream as apas_stream
    from tests.learners.test_arow import dense_data
    from tests.learners.test_dvaw import gaussian, rankdef

    X, y, _ = gaussian(10, 5000, 0)
    yield "tests/learners/test_dvaw.py: gaussian d=10", X, [float(v) for v in y]
    X, y = rankdef(3000, 10, 1, True)
    yield "tests/learners/test_dvaw.py: rank-deficient", X, [float(v) for v in y]
    X, y, _ = dense_data()
    yield "tests/learners/test_arow.py: dense data", X, None
    X, y = apas_stream(2000, 20, 3)
    yield "tests/learners/test_apas.py: index stream", X, [float(v) for v in y]
    for kind in sorted(learners.REGISTRY):
        cls = learners.REGISTRY[kind]
        X, Y = cls._test_stream(8, 2000, 0)
        ys = [float(v) for v in Y] if cls.task == "regression" else None
        yield f"_test_stream: {kind}", np.asarray(X, float), ys


def main() -> None:
    rows = []
    for source in (river_streams, dvaw_streams, apas_panel, bundled_classification, synthetic):
        try:
            for name, X, y in source():
                rows.append((name, len(X), X.shape[1], refused(X, y)))
        except Exception as exc:  # a data set this machine lacks: said, not hidden
            rows.append((f"{source.__name__}: not run ({type(exc).__name__}: {exc})", 0, 0, -1))
    lines = [
        "# What the scale guard refuses of the benchmarks' streams",
        "",
        "`python benchmarks/guard_streams.py` (service/metrics/guard.py; x and, for",
        "regression, y guarded). 0 refused: a worker learns every row, as the benchmark did.",
        "",
        "| stream | rows | d | refused |",
        "|---|---|---|---|",
        *(f"| {n} | {r} | {d} | {k} |" for n, r, d, k in rows),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    write_text(RESULT, text)


if __name__ == "__main__":
    main()
