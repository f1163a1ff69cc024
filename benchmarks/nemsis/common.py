"""Shared pieces of the NEMSIS / SCAN reproductions (``docs/algorithms/nemsis.md``).

Data (the §6.2 Gaussian generator and the Table-3 clones), evaluation of a linear scorer
on a test set, the offline baselines of §2.6 (1PMB, a batch structural-SVM substitute,
logistic regression + CC/ACC/PCC/PACC) and markdown output.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from learners import quantification as Q  # noqa: E402
from learners.quantification.estimators import Calibration  # noqa: E402
from learners.quantification.nemsis import NEMSIS  # noqa: E402
from learners.quantification.scan import SCAN  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "nemsis"

#: Table 3 of the paper: name -> (points, features, positive rate)
TABLE3 = {
    "KDDCup08": (102_294, 117, 0.0061),
    "PPI": (240_249, 85, 0.0119),
    "CoverType": (581_012, 54, 0.0163),
    "ChemInfo": (2_142, 55, 0.0233),
    "Letter": (20_000, 16, 0.0392),
    "IJCNN": (141_691, 22, 0.0957),
    "Adult": (48_842, 123, 0.2393),
    "CodRNA": (488_565, 8, 0.333),
}

Data = tuple[np.ndarray, np.ndarray]


# ---- data --------------------------------------------------------------------------------
def unit_direction(rng: np.random.Generator, d: int) -> np.ndarray:
    u = rng.normal(size=d)
    return u / np.linalg.norm(u)


def gaussian(rng: np.random.Generator, n: int, p: float, u: np.ndarray, delta: float = 1.5) -> Data:
    """§6.2: y ~ Bernoulli(p), x | y ~ N(y (delta/2) u, I_d); Bayes BA = Phi(delta/2)."""
    y = np.where(rng.random(n) < p, 1, -1)
    return rng.normal(size=(n, u.size)) + (y * delta / 2)[:, None] * u, y


def split(X: np.ndarray, y: np.ndarray, rng: np.random.Generator, test: float = 0.3):  # type: ignore[no-untyped-def]
    """Stratified 70/30 split, then 20% of training held out for validation (§6.2)."""
    idx_tr, idx_te = [], []
    for label in (-1, 1):
        idx = rng.permutation(np.flatnonzero(y == label))
        k = int(round(test * idx.size))
        idx_te.append(idx[:k])
        idx_tr.append(idx[k:])
    tr = rng.permutation(np.concatenate(idx_tr))
    te = rng.permutation(np.concatenate(idx_te))
    return X[tr], y[tr], X[te], y[te]


def standardise(X_tr: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """z-score with training statistics (§2.7 [EXT]); constant columns are left centred."""
    mu, sd = X_tr.mean(axis=0), X_tr.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return [(A - mu) / sd for A in (X_tr, *others)]


def add_bias(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


# ---- evaluation --------------------------------------------------------------------------
def measures_of_scores(scores: np.ndarray, y: np.ndarray, *, C: float = 0.5) -> dict[str, float]:
    """Every §1.3 measure of the sign of ``scores`` (0 is negative), KLD_eps with
    eps = 1/(2|S|) (the paper's evaluation smoothing)."""
    pred = np.where(scores > 0, 1, -1)
    return Q.all_measures(*Q.confusion_counts(y, pred), C=C)


def best_threshold(proj: np.ndarray, y: np.ndarray, measure: Callable[..., float]) -> float:
    """Oracle: best value of ``measure`` over 999 quantile thresholds of ``proj``."""
    ths = np.quantile(proj, np.linspace(0.001, 0.999, 999))
    return max(float(measure(*Q.confusion_counts(y, np.where(proj > t, 1, -1)))) for t in ths)


def train_online(model: NEMSIS | SCAN, X: np.ndarray, y: np.ndarray, chunk: int = 0):  # type: ignore[no-untyped-def]
    """Feed (X, y) to the learner; with ``chunk`` > 0 yields (seconds, events) after every
    chunk so curves can be drawn (evaluation time is excluded by the caller)."""
    labels = [int(v) for v in y]
    if chunk <= 0:
        model.learn_many(X, labels)
        return
    spent = 0.0
    for i in range(0, len(labels), chunk):
        t0 = time.perf_counter()
        model.learn_many(X[i : i + chunk], labels[i : i + chunk])
        spent += time.perf_counter() - t0
        yield spent, min(i + chunk, len(labels))


# ---- offline baselines (§2.6) ------------------------------------------------------------
def _perf_grid(measure: str, kp: np.ndarray, kn: np.ndarray, n_pos: int, n_neg: int, **kw):  # type: ignore[no-untyped-def]
    """Perf(k+, k-) for labellings with k+ positives and k- negatives marked + (rates form)."""
    P = kp / max(n_pos, 1)
    N = 1.0 - kn / max(n_neg, 1)
    p = n_pos / (n_pos + n_neg)
    size = n_pos + n_neg
    eps = 1.0 / (2.0 * size)
    if measure == "negkld":
        return -np.asarray(Q.kld_rates(P, N, p, eps))
    if measure == "q":
        return np.asarray(Q.q_beta_rates(P, N, p, kw.get("beta", 1.0)))
    if measure == "bakld":
        return np.asarray(Q.bakld_rates(P, N, p, kw.get("C", 0.5), eps))
    if measure == "cqreward":
        return np.asarray(Q.cqreward_rates(P, N, p))
    if measure == "bkreward":
        return np.asarray(Q.bkreward_rates(P, N, p, eps))
    raise ValueError(measure)


def _grid(n: int, cap: int) -> np.ndarray:
    return (
        np.arange(n + 1) if n <= cap else np.unique(np.linspace(0, n, cap + 1).round().astype(int))
    )


def structural_subgradient(
    w: np.ndarray, Xb: np.ndarray, y: np.ndarray, measure: str, cap: int = 600, **kw: float
) -> tuple[np.ndarray, float]:
    """Subgradient of the 1-slack structural hinge (§2.6, SVMperf's loss) at ``w`` on the
    batch: xi = max_y' [Delta(y', y) + (1/T) sum (y'_i - y_i) <w, x_i>], with the most violated
    labelling found by sorting each class once and enumerating (k+, k-) (prefix sums).
    ``cap`` bounds the grid per class (exact when the class has <= cap points)."""
    s = Xb @ w
    pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
    sp, sn = np.sort(s[pos])[::-1], np.sort(s[neg])[::-1]
    cp = np.concatenate([[0.0], np.cumsum(sp)])
    cn = np.concatenate([[0.0], np.cumsum(sn)])
    kp, kn = _grid(pos.size, cap), _grid(neg.size, cap)
    T = y.size
    perf_true = _perf_grid(measure, np.array([pos.size]), np.array([0]), pos.size, neg.size, **kw)[
        0
    ]
    delta = perf_true - _perf_grid(measure, kp[:, None], kn[None, :], pos.size, neg.size, **kw)
    # sum_i (y'_i - y_i) s_i = 2 (top-k+ positives + top-k- negatives) - 2 sum_pos - ... :
    # y'_i - y_i is -2 for unmarked positives, +2 for marked negatives, 0 otherwise
    gain = (-2.0 * (cp[-1] - cp[kp]))[:, None] + (2.0 * cn[kn])[None, :]
    total = delta + gain / T
    i, j = np.unravel_index(int(np.argmax(total)), total.shape)
    k_plus, k_minus = int(kp[i]), int(kn[j])
    ypred = y.astype(np.float64).copy()
    order_p, order_n = pos[np.argsort(-s[pos])], neg[np.argsort(-s[neg])]
    ypred[order_p[k_plus:]] = -1.0
    ypred[order_n[:k_minus]] = 1.0
    grad = ((ypred - y) @ Xb) / T
    return grad, float(total[i, j])


def project(w: np.ndarray, radius: float) -> np.ndarray:
    nrm = float(np.linalg.norm(w))
    return w * (radius / nrm) if nrm > radius else w


def one_pass_minibatch(
    X: np.ndarray,
    y: np.ndarray,
    measure: str,
    *,
    buffer: int = 500,
    epochs: int = 1,
    eta0: float = 1.0,
    radius: float = 10.0,
    checkpoint: Callable[[np.ndarray, float], None] | None = None,
    **kw: float,
) -> np.ndarray:
    """1PMB (Kar et al. NIPS'14, §2.6): per buffer of B points a projected subgradient step
    on the structural surrogate of the buffer; ``epochs`` passes (the paper's "25 passes")."""
    Xb = add_bias(X)
    w = np.zeros(Xb.shape[1])
    w_sum, k = np.zeros_like(w), 0
    spent = 0.0
    for _ in range(epochs):
        for i in range(0, y.size - buffer + 1, buffer):
            t0 = time.perf_counter()
            k += 1
            g, _ = structural_subgradient(w, Xb[i : i + buffer], y[i : i + buffer], measure, **kw)
            w = project(w - (eta0 / np.sqrt(k)) * g, radius)
            w_sum += w
            spent += time.perf_counter() - t0
            if checkpoint is not None:
                checkpoint(w_sum / k, spent)
    return w_sum / max(k, 1)


def batch_structural_svm(
    X: np.ndarray,
    y: np.ndarray,
    measure: str,
    *,
    iters: int = 200,
    lam: float = 1e-4,
    eta0: float = 1.0,
    radius: float = 10.0,
    checkpoint: Callable[[np.ndarray, float], None] | None = None,
    **kw: float,
) -> np.ndarray:
    """ "SVMperf-substitute" (§6.2 item 4): full-batch projected subgradient descent on
    lam/2 ||w||^2 + xi(w) with the same loss-augmented inference (averaged iterate)."""
    Xb = add_bias(X)
    w = np.zeros(Xb.shape[1])
    w_sum = np.zeros_like(w)
    spent = 0.0
    for k in range(1, iters + 1):
        t0 = time.perf_counter()
        g, _ = structural_subgradient(w, Xb, y, measure, **kw)
        w = project(w - (eta0 / np.sqrt(k)) * (g + lam * w), radius)
        w_sum += w
        spent += time.perf_counter() - t0
        if checkpoint is not None:
            checkpoint(w_sum / k, spent)
    return w_sum / iters


def logistic_quantifiers(
    X_tr: np.ndarray, y_tr: np.ndarray, X_val: np.ndarray, y_val: np.ndarray
) -> tuple[np.ndarray, Calibration]:
    """Logistic regression (sklearn) trained on the training part, with the CC/ACC/PCC/PACC
    statistics of its scores on the validation part. Returns (w with bias, calibration)."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1.0, max_iter=1000).fit(X_tr, y_tr)
    w = np.concatenate([lr.coef_[0], lr.intercept_])
    return w, Calibration.fit(add_bias(X_val) @ w, y_val)


# ---- output ------------------------------------------------------------------------------
def _cell(v: object) -> str:
    if isinstance(v, float):
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.2e}"
        return f"{v:.4f}"
    return str(v)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return _report.markdown_table(header, rows, _cell)


def write(name: str, text: str) -> Path:
    """Write ``benchmarks/results/nemsis/<name>`` and show it."""
    path = _report.write_text(RESULTS / name, text)
    print(text)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"\nwritten to {shown}")
    return path
