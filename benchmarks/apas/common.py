"""Shared pieces of the APAS reproductions: data, metrics (eqs. (13)-(14)), one online run,
and markdown output (``docs/algorithms/apas.md``).
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from learners import build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "apas"
SP500_2010 = ROOT / "benchmarks" / "data" / "sp500_2010.csv.gz"


def load_sp500_2010() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(returns T x 386, index returns T, tickers) of INDEX_2010 (benchmarks/data/README.md)."""
    with gzip.open(SP500_2010, "rt") as fh:
        header = fh.readline().strip().split(",")
    raw = np.loadtxt(SP500_2010, delimiter=",", skiprows=1, dtype=np.float64)
    cols = [i for i, n in enumerate(header) if n not in ("t", "SP500")]
    return raw[:, cols], raw[:, header.index("SP500")], [header[i] for i in cols]


def tracking_error(residuals: np.ndarray) -> float:
    """Eq. (13): TE = sqrt(sum e_t^2) / T, with 1/T outside the root (§7 item 10)."""
    return float(np.sqrt(np.sum(residuals**2)) / residuals.size)


def excess_cumulative_return(y_hat: np.ndarray, y: np.ndarray) -> float:
    """Eq. (14): ECR = sum log(1 + w_t.x_t) - sum log(1 + y_t)."""
    return float(np.sum(np.log1p(y_hat)) - np.sum(np.log1p(y)))


def te_curve(residuals: np.ndarray) -> np.ndarray:
    """TE(tau) over the first tau test days, tau = 1..T."""
    return np.sqrt(np.cumsum(residuals**2)) / np.arange(1, residuals.size + 1)


def ecr_curve(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.cumsum(np.log1p(y_hat) - np.log1p(y))


@dataclass
class Run:
    """Predictions over the whole stream and the test-period metrics."""

    y_hat: np.ndarray
    y: np.ndarray
    test_from: int
    epsilon: np.ndarray
    turnover: np.ndarray
    active: np.ndarray

    @property
    def te(self) -> float:
        return tracking_error(self.y_hat[self.test_from :] - self.y[self.test_from :])

    @property
    def ecr(self) -> float:
        return excess_cumulative_return(self.y_hat[self.test_from :], self.y[self.test_from :])


def run_online(X: np.ndarray, y: np.ndarray, test_from: int, **params: object) -> Run:
    """One APAS-family learner from t = 1 over the whole stream (§5.1): w_t is used on day t
    before it sees (x_t, y_t), and t is not reset at the warm-up/test split."""
    model = build("apas", X.shape[1], **params)
    y_hat = np.empty(len(y))
    eps, turnover, active = np.empty(len(y)), np.empty(len(y)), np.empty(len(y))
    for t, (x, target) in enumerate(zip(X, y, strict=True)):
        rep = model.learn(x, float(target))
        y_hat[t] = rep.prediction
        eps[t] = rep.diagnostics["epsilon_used"]
        turnover[t] = rep.diagnostics["turnover"]
        active[t] = rep.diagnostics["active_assets"]
    return Run(y_hat, np.asarray(y, dtype=np.float64), test_from, eps, turnover, active)


# The methods of §5.3 as APAS-family configurations (simplex W, log-return h).
def apas(lam: float) -> dict[str, object]:
    return {"lam": lam}


def pas(lam: float, eps: float) -> dict[str, object]:
    return {"lam": lam, "epsilon": eps, "adaptive": False}


def pa(eps: float) -> dict[str, object]:
    """PA with lazy projection onto the simplex (h const, fixed epsilon), §2.5."""
    return {"side": "none", "epsilon": eps, "adaptive": False}


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6f}" if abs(v) < 1 else f"{v:.4g}"
    return str(v)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return _report.markdown_table(header, rows, _cell)


def write(name: str, text: str) -> Path:
    return _report.write_text(RESULTS / name, text)
