"""Calibration of the classifiers' probabilities (issue 16 item 3) against river.

Each classifier kind learns one pass over a training split, then ``predict_proba_many``
gives p(+1) for the held-out split; river's ``StandardScaler | LogisticRegression`` learns
the same rows in the same order and answers ``predict_proba_one``. Figures per data set
(mean over seeds): log loss (p clipped to [1e-15, 1 - 1e-15]), expected calibration error
(ECE, 10 equal-width bins of the confidence max(p, 1 - p): sum over bins of
|accuracy - mean confidence| weighted by the bin's share), and the accuracy of
``predict(x).value`` (river: of ``predict_one``).

Data (shipped inside the wheels of scikit-learn and river, no download): breast_cancer
(malignant = +1), river Phishing, river Bananas (not linearly separable), digits odd vs
even, river Yeast Class2 vs rest, river ImageSegments "window" vs rest. Per data set and
seed: stratified 70/30 split, features z-scored with the training split's statistics, and
a constant 1 column appended for our linear classifiers (they have no intercept; the
quantifiers have their own, ``fit_intercept``). Learners at their default hyperparameters.
``transductive-logistic`` is left out: it predicts only vectors registered in a block
before their labels, with a MALA run per prediction.

    python benchmarks/calibration.py [--seeds 5]

Writes benchmarks/results/calibration.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from benchmarks._binary_data import load_binary, split  # noqa: E402
from learners import REGISTRY  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "calibration.md"
BINS = 10
CLIP = 1e-15
RIVER = "river LogisticRegression"
#: calibration fields set so that AROW / CW answer the pure Gaussian Phi(m / sqrt(1 + v))
PURE_GAUSSIAN = {"calib_a_": 1.0, "calib_b_": 0.0, "calib_vaa_": 0.0, "calib_vab_": 0.0}
PURE_GAUSSIAN |= {"calib_vbb_": 0.0}
#: (row label, kind, params, appends the intercept column)
OURS: tuple[tuple[str, str, dict[str, Any], bool], ...] = (
    ("arow", "arow", {}, True),
    ("arow, pure Gaussian (no calibration)", "arow", {}, True),
    ('arow diagonal="cov"', "arow", {"diagonal": "cov"}, True),
    ("arow classes=[-1, 1]", "arow", {"classes": [-1, 1]}, True),
    ("cw", "cw", {}, True),
    ("sop", "sop", {}, True),
    ("pa-classifier", "pa-classifier", {}, True),
    ("perceptron", "perceptron", {}, True),
    ("nemsis", "nemsis", {}, False),
    ("scan", "scan", {}, False),
)

Data = tuple[np.ndarray, np.ndarray]


# ---- data --------------------------------------------------------------------------------
def load_all() -> dict[str, Data]:
    """The shared binary data sets (``benchmarks/_binary_data.py``), labels -1/+1."""
    return {name: (X, np.where(pos, 1, -1)) for name, (X, pos) in load_binary().items()}


# ---- metrics -----------------------------------------------------------------------------
def log_loss(p_plus: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(np.where(y > 0, p_plus, 1.0 - p_plus), CLIP, 1.0)
    return float(-np.mean(np.log(p)))


def ece(p_plus: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error of the confidence max(p, 1 - p), equal-width bins."""
    conf = np.maximum(p_plus, 1.0 - p_plus)
    correct = np.where(p_plus >= 0.5, 1, -1) == y
    edges = np.linspace(0.5, 1.0, bins + 1)
    idx = np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, bins - 1)
    total = 0.0
    for b in range(bins):
        mask = idx == b
        if mask.any():
            total += mask.mean() * abs(correct[mask].mean() - conf[mask].mean())
    return float(total)


def figures(p_plus: np.ndarray, y_hat: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    return log_loss(p_plus, y), ece(p_plus, y), float(np.mean(y_hat == y))


# ---- the two sides -----------------------------------------------------------------------
def ours(  # type: ignore[no-untyped-def]
    kind: str, params: dict[str, Any], intercept: bool, pure: bool, data: tuple[np.ndarray, ...]
):
    X_tr, y_tr, X_te, y_te = data
    if intercept:
        X_tr = np.hstack([X_tr, np.ones((X_tr.shape[0], 1))])
        X_te = np.hstack([X_te, np.ones((X_te.shape[0], 1))])
    model = REGISTRY[kind](X_tr.shape[1], **params)
    model.learn_many(X_tr, [int(v) for v in y_tr])
    if pure:
        model = REGISTRY[kind].from_state({**model.state(), **PURE_GAUSSIAN})
    proba = model.predict_proba_many(X_te)
    p_plus = np.array([p[1] for p in proba])
    y_hat = np.array([p.value for p in model.predict_many(X_te)])
    return figures(p_plus, y_hat, y_te)


def river_side(data: tuple[np.ndarray, ...]) -> tuple[float, float, float]:
    from river import linear_model, preprocessing

    X_tr, y_tr, X_te, y_te = data
    model = preprocessing.StandardScaler() | linear_model.LogisticRegression()
    for x, v in zip(X_tr, y_tr, strict=True):
        model.learn_one(dict(enumerate(x.tolist())), bool(v > 0))
    rows = [dict(enumerate(x.tolist())) for x in X_te]
    p_plus = np.array([model.predict_proba_one(r).get(True, 0.0) for r in rows])
    y_hat = np.array([1 if model.predict_one(r) else -1 for r in rows])
    return figures(p_plus, y_hat, y_te)


# ---- report ------------------------------------------------------------------------------
def run(seeds: int) -> dict[tuple[str, str], np.ndarray]:
    """(data set, row label) -> array (seeds, 3) of log loss, ECE, accuracy."""
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for name, (X, y) in load_all().items():
        for seed in range(seeds):
            data = split(X, y, seed)
            results.setdefault((name, RIVER), []).append(river_side(data))
            for label, kind, params, intercept in OURS:
                pure = "pure Gaussian" in label
                row = ours(kind, params, intercept, pure, data)
                results.setdefault((name, label), []).append(row)
    return {k: np.array(v) for k, v in results.items()}


def report(results: dict[tuple[str, str], np.ndarray], seeds: int, seconds: float) -> str:
    names = list(dict.fromkeys(name for name, _ in results))
    labels = [RIVER] + [label for label, *_ in OURS]
    lines = [
        "# Calibration of class probabilities (`benchmarks/calibration.py`)",
        "",
        f"{seeds} seeds per data set (stratified 70/30 split, z-scored with training"
        " statistics, one pass); held-out log loss / ECE (10 bins) / accuracy, mean over"
        f" seeds. Run time {seconds:.0f} s.",
        "",
    ]
    header = ["model"] + names + ["mean"]
    for j, what in enumerate(("log loss", "ECE", "accuracy")):
        rows = []
        for label in labels:
            vals = [float(results[(n, label)][:, j].mean()) for n in names]
            rows.append([label] + [f"{v:.3f}" for v in vals] + [f"{np.mean(vals):.3f}"])
        lines += [f"## {what}", "", _report.markdown_table(header, rows), ""]
    lines += ["## Ratio to river's log loss (mean over data sets of ours / river's)", ""]
    rows = []
    for label in labels[1:]:
        ratios = [
            float(results[(n, label)][:, 0].mean() / results[(n, RIVER)][:, 0].mean())
            for n in names
        ]
        worse = sum(r > 1.0 for r in ratios)
        rows.append([label, f"{np.mean(ratios):.2f}", f"{worse} of {len(names)}"])
    lines += [_report.markdown_table(["model", "log-loss ratio", "worse than river on"], rows)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    start = time.perf_counter()
    results = run(args.seeds)
    text = report(results, args.seeds, time.perf_counter() - start)
    _report.write_text(RESULT, text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
