"""Built-in data sets for stream replay, each a stream of ``(x, y)`` with a default learner.

``x`` is a list of floats, ``y`` a float (regression, tracking), +1/-1 (classification,
quantification) or None (an unlabelled vector). river, scikit-learn and skfolio are
imported lazily, only by the data sets that need them (``pip install 'onlinepredict[data]'``).

Examples
--------
>>> ds = load_dataset("synth-drift-jumps")
>>> ds.kind, ds.dim, ds.task
('dvaw-ensemble', 10, 'regression')
>>> x, y = next(iter(ds.stream(limit=1)))
>>> len(x), isinstance(y, float)
(10, True)
"""

from __future__ import annotations

import csv
import gzip
import importlib
import math
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Item = tuple[list[float], float | int | None]


class MissingDependencyError(ImportError):
    """A data set needs an optional package that is not installed."""


def _require(module: str, dataset: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0].replace("sklearn", "scikit-learn")
        raise MissingDependencyError(
            f"data set {dataset!r} needs {package}: pip install {package} "
            "(or pip install 'onlinepredict[data]')"
        ) from exc


@dataclass(frozen=True)
class Dataset:
    """A replayable stream.

    Attributes
    ----------
    name : str
        The name ``onlinepredict replay`` takes.
    kind : str or None
        The learner kind a model for it gets by default (None: the user must choose).
    dim : int
        Length of every ``x``.
    task : str
        ``"regression"``, ``"tracking"``, ``"classification"`` or ``"quantification"``.
    n : int or None
        Number of events when known in advance.
    params : dict
        Default learner hyperparameters.
    options : dict
        The generator's own options and their defaults (``stream(**options)`` overrides).
    feature_names : tuple of str or None
        Names of the ``dim`` features when meaningful (the S&P 500 panel's tickers).
    """

    name: str
    kind: str | None
    dim: int
    task: str
    n: int | None
    description: str
    _source: Callable[..., Iterator[Item]] = field(repr=False)
    params: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    feature_names: tuple[str, ...] | None = None

    def stream(self, limit: int | None = None, **options: Any) -> Iterator[Item]:
        """Yield ``(x, y)``; ``options`` override the data set's own (e.g. ``seed=1``)."""
        unknown = set(options) - set(self.options)
        if unknown:
            raise ValueError(
                f"data set {self.name!r} has no option {sorted(unknown)}; "
                f"options: {sorted(self.options) or 'none'}"
            )
        items = self._source(**{**self.options, **options})
        for i, item in enumerate(items):
            if limit is not None and i >= limit:
                return
            yield item

    def __iter__(self) -> Iterator[Item]:
        return self.stream()

    def length(self, limit: int | None = None) -> int | None:
        if self.n is None:
            return limit
        return self.n if limit is None else min(self.n, limit)


def _rows(X: np.ndarray, y: np.ndarray) -> Iterator[Item]:
    yield from zip(X.tolist(), y.tolist(), strict=True)


# --- real data -----------------------------------------------------------------------------
SP500_TICKERS = (
    "AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
    "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM",
)  # fmt: skip


def _sp500() -> Iterator[Item]:
    """Daily simple returns of 20 S&P 500 stocks (x) and of the S&P 500 index (y)."""
    sk = _require("skfolio.datasets", "sp500")
    prices = sk.load_sp500_dataset()
    index = sk.load_sp500_index()
    prices = prices[list(SP500_TICKERS)]  # the order the model's assets are named in
    joined = prices.join(index.iloc[:, 0].rename("__index__"), how="inner").sort_index()
    returns = joined.pct_change().iloc[1:].dropna()
    X = returns.drop(columns="__index__").to_numpy(dtype=float)
    yield from _rows(X, returns["__index__"].to_numpy(dtype=float))


def _trump() -> Iterator[Item]:
    """The five pollsters' approval figures (ordinal_date dropped: it is a time stamp)."""
    datasets = _require("river.datasets", "trump-approval")
    for x, y in datasets.TrumpApproval():
        yield [float(v) for k, v in x.items() if k != "ordinal_date"], float(y)


def _water_flow(lags: int = 4) -> Iterator[Item]:
    """Autoregressive features: the last ``lags`` hourly flows and a constant 1 (bias)."""
    datasets = _require("river.datasets", "water-flow")
    history: list[float] = []
    for _, y in datasets.WaterFlow():
        if len(history) >= lags:
            yield [*history[-lags:][::-1], 1.0], float(y)
        history.append(float(y))


def _phishing() -> Iterator[Item]:
    """Nine URL features plus a bias; y = +1 for phishing."""
    datasets = _require("river.datasets", "phishing")
    for x, y in datasets.Phishing():
        yield [*(float(v) for v in x.values()), 1.0], 1 if y else -1


def prevalence_schedule(n: int, schedule: str = "steps") -> np.ndarray:
    """Target positive-class prevalence at each of ``n`` steps.

    ``"steps"``: 0.2, 0.5, 0.8, 0.35 for a quarter of the stream each; ``"linear"``: 0.1 to
    0.9; ``"sine"``: between 0.1 and 0.9, two periods.

    Examples
    --------
    >>> prevalence_schedule(8).tolist()
    [0.2, 0.2, 0.5, 0.5, 0.8, 0.8, 0.35, 0.35]
    """
    t = np.arange(n)
    if schedule == "steps":
        levels = np.array([0.2, 0.5, 0.8, 0.35])
        return levels[np.minimum(t * len(levels) // max(n, 1), len(levels) - 1)]
    if schedule == "linear":
        return 0.1 + 0.8 * t / max(n - 1, 1)
    if schedule == "sine":
        return 0.5 - 0.4 * np.cos(4 * math.pi * t / max(n, 1))
    raise ValueError(f"unknown schedule {schedule!r}; valid: 'steps', 'linear', 'sine', 'none'")


def _drifting_prevalence(
    X: np.ndarray, y: np.ndarray, n: int, schedule: str, unlabelled: float, seed: int
) -> Iterator[Item]:
    """Resample (with replacement) so the positive rate follows the schedule (label shift)."""
    rng = np.random.default_rng(seed)
    X = np.hstack([X, np.ones((len(X), 1))])  # bias feature
    pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y <= 0)
    if schedule == "none":
        order = rng.permutation(len(X))
    else:
        p = prevalence_schedule(n, schedule)
        positive = rng.random(n) < p
        order = np.where(positive, rng.choice(pos, n), rng.choice(neg, n))
    hide = rng.random(len(order)) < unlabelled
    for i, h in zip(order.tolist(), hide.tolist(), strict=True):
        yield X[i].tolist(), None if h else int(y[i])


def _breast_cancer(
    n: int = 2000, schedule: str = "steps", unlabelled: float = 0.0, seed: int = 0
) -> Iterator[Item]:
    """30 standardised features + bias; y = +1 for malignant."""
    sk = _require("sklearn.datasets", "breast-cancer")
    data = sk.load_breast_cancer()
    X = (data.data - data.data.mean(0)) / data.data.std(0)
    y = np.where(data.target == 0, 1, -1)  # sklearn's target 0 is malignant
    yield from _drifting_prevalence(X, y, n, schedule, unlabelled, seed)


def _digits(
    n: int = 3000,
    positive: int = 0,
    schedule: str = "steps",
    unlabelled: float = 0.0,
    seed: int = 0,
) -> Iterator[Item]:
    """64 pixel intensities scaled to [0, 1] + bias; y = +1 for the digit ``positive``."""
    sk = _require("sklearn.datasets", "digits")
    data = sk.load_digits()
    y = np.where(data.target == positive, 1, -1)
    yield from _drifting_prevalence(data.data / 16.0, y, n, schedule, unlabelled, seed)


# --- synthetic generators of the seed papers' experiments ------------------------------------
def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def drift_comparators(scenario: str, T: int, d: int, seed: int) -> np.ndarray:
    """The generating sequence u_t (T x d) of docs/algorithms/dvaw.md."""
    ru = np.random.default_rng(seed + 1000)
    if scenario == "static":
        return np.tile(_unit(ru.standard_normal(d)), (T, 1))
    if scenario.startswith("jumps"):
        L = int(scenario.partition("_")[2] or 2000)
        K = math.ceil(T / L)
        us = np.array([_unit(ru.standard_normal(d)) for _ in range(K)])
        return us[np.arange(T) // L]
    if scenario == "walk":
        u1 = _unit(ru.standard_normal(d))
        steps = (0.005 / math.sqrt(d)) * ru.standard_normal((T - 1, d))
        return np.vstack([u1, u1 + np.cumsum(steps, axis=0)])
    if scenario == "rotate":
        a = _unit(ru.standard_normal(d))
        b0 = ru.standard_normal(d)
        b = _unit(b0 - (b0 @ a) * a)
        w = 2 * math.pi / 5000
        t = np.arange(1, T + 1)[:, None]
        return np.cos(w * t) * a + np.sin(w * t) * b
    raise ValueError(f"unknown drift scenario {scenario!r}")


def _synth_drift(
    scenario: str = "static", T: int = 20_000, d: int = 10, sigma: float = 0.1, seed: int = 0
) -> Iterator[Item]:
    """y_t = <x_t, u_t> + eps_t, x_t ~ N(0, I) (docs/algorithms/dvaw.md, exact draw order)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    eps = sigma * rng.standard_normal(T)
    U = drift_comparators(scenario, T, d, seed)
    yield from _rows(X, np.einsum("td,td->t", X, U) + eps)


def _synth_index(N: int = 20, T: int = 2000, delta: float = 1e-3, seed: int = 0) -> Iterator[Item]:
    """Index tracking (docs/algorithms/apas.md): x_t ~ N(mu, Sigma), y_t = x_t . w* + N(0, delta^2).

    mu and Sigma come from a one-factor model of daily returns (market sd 1%, betas in
    [0.5, 1.5], idiosyncratic sd 1.5%) instead of real stocks, so it runs without skfolio;
    w* ~ Dirichlet(1, ..., 1) as the spec's default.
    """
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.5, 1.5, N)
    mu = 3e-4 * beta
    Sigma = 1e-4 * np.outer(beta, beta) + (0.015**2) * np.eye(N)
    w_star = rng.dirichlet(np.ones(N))
    X = rng.multivariate_normal(mu, Sigma, size=T, method="cholesky")
    yield from _rows(X, X @ w_star + delta * rng.standard_normal(T))


def _synth_noisy_labels(
    T: int = 5000, noise: float = 0.1, d: int = 20, seed: int = 0
) -> Iterator[Item]:
    """AROW's synthetic study (``docs/algorithms/arow.md``): a rotated elongated
    Gaussian, flipped labels."""
    rng = np.random.default_rng(seed)
    z1, z2 = 10.0 * rng.standard_normal(T), rng.standard_normal(T)
    X = np.empty((T, d))
    X[:, 0], X[:, 1] = (z1 - z2) / math.sqrt(2), (z1 + z2) / math.sqrt(2)
    X[:, 2:] = math.sqrt(2.0) * rng.standard_normal((T, d - 2))
    y = np.where(z2 >= 0, 1, -1)
    y = np.where(rng.random(T) < noise, -y, y)
    yield from _rows(X, y)


def _synth_prevalence(
    T: int = 10_000,
    d: int = 10,
    separation: float = 1.5,
    schedule: str = "steps",
    unlabelled: float = 0.0,
    seed: int = 0,
) -> Iterator[Item]:
    """y ~ Bernoulli(p_t), x | y ~ N(y (delta/2) u, I) + bias; p_t drifts
    (``docs/algorithms/nemsis.md``)."""
    rng = np.random.default_rng(seed)
    u = _unit(rng.standard_normal(d))
    p = prevalence_schedule(T, schedule) if schedule != "none" else np.full(T, 0.5)
    y = np.where(rng.random(T) < p, 1, -1)
    X = y[:, None] * (separation / 2) * u + rng.standard_normal((T, d))
    X = np.hstack([X, np.ones((T, 1))])
    hide = rng.random(T) < unlabelled
    for xi, yi, h in zip(X.tolist(), y.tolist(), hide.tolist(), strict=True):
        yield xi, None if h else yi


def _registry() -> dict[str, Dataset]:
    sets = [
        Dataset("sp500", "apas", 20, "tracking", 8312,
                "skfolio: 20 S&P 500 stocks' daily returns (x), the S&P 500 index return (y)",
                _sp500, feature_names=SP500_TICKERS),
        Dataset("trump-approval", "dvaw-ensemble", 5, "regression", 1001,
                "river TrumpApproval: five pollsters' figures (x), the approval rating (y)",
                _trump),
        Dataset("water-flow", "dvaw-ensemble", 5, "regression", 1264,
                "river WaterFlow: the last 4 hourly flows and a bias (x), the flow (y)",
                _water_flow),
        Dataset("phishing", "arow", 10, "classification", 1250,
                "river Phishing: 9 URL features and a bias (x), phishing or not (y = +1/-1)",
                _phishing),
        Dataset("breast-cancer", "nemsis", 31, "quantification", 2000,
                "sklearn breast_cancer resampled so malignant prevalence drifts (steps)",
                _breast_cancer,
                options={"n": 2000, "schedule": "steps", "unlabelled": 0.0, "seed": 0}),
        Dataset("digits", "nemsis", 65, "quantification", 3000,
                "sklearn digits, one digit vs rest, with a prevalence-drift schedule",
                _digits,
                options={"n": 3000, "positive": 0, "schedule": "steps", "unlabelled": 0.0,
                         "seed": 0}),
        Dataset("synth-index", "apas", 20, "tracking", 2000,
                "APAS §4.1: Gaussian returns, index = x . w* + noise, w* ~ Dirichlet",
                _synth_index, options={"N": 20, "T": 2000, "delta": 1e-3, "seed": 0}),
        Dataset("synth-noisy-labels", "arow", 20, "classification", 5000,
                "AROW §5: rotated elongated Gaussian in R^20, 10% of labels flipped",
                _synth_noisy_labels, options={"T": 5000, "noise": 0.1, "d": 20, "seed": 0}),
        Dataset("synth-prevalence", "nemsis", 11, "quantification", 10_000,
                "NEMSIS §6.2: two Gaussians, the positive prevalence drifts in steps",
                _synth_prevalence,
                options={"T": 10_000, "d": 10, "separation": 1.5, "schedule": "steps",
                         "unlabelled": 0.0, "seed": 0}),
    ]  # fmt: skip
    for scenario in ("static", "jumps", "walk", "rotate"):
        sets.append(
            Dataset(
                f"synth-drift-{scenario}", "dvaw-ensemble", 10, "regression", 20_000,
                f"discounted VAW §7.1 '{scenario}': y = <x, u_t> + N(0, 0.1^2), d = 10",
                _synth_drift,
                options={"scenario": "jumps_2000" if scenario == "jumps" else scenario,
                         "T": 20_000, "d": 10, "sigma": 0.1, "seed": 0},
            )
        )  # fmt: skip
    return {d.name: d for d in sets}


DATASETS: dict[str, Dataset] = _registry()


def _parse_cell(value: str, where: str) -> float | None:
    if value.strip() == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not a number") from None


def from_csv(path: str | pathlib.Path, target: str | None = None) -> Dataset:
    """A CSV file (``.csv`` or ``.csv.gz``) with a header as a stream.

    The target column is ``target``, else one named ``y`` or ``target``, else the last
    column; every other column is a numeric feature. An empty target cell is an unlabelled
    vector. There is no default learner kind: pass one.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")

    def _open() -> Any:
        if path.suffix == ".gz":
            return gzip.open(path, "rt", newline="")
        return path.open(newline="")

    with _open() as fh:
        header = next(csv.reader(fh), None)
    if not header or len(header) < 2:
        raise ValueError(f"{path}: need a header with at least one feature and a target column")
    header = [h.strip() for h in header]
    if target is None:
        target = next((h for h in ("y", "target") if h in header), header[-1])
    if target not in header:
        raise ValueError(f"{path}: no column {target!r}; columns: {header}")
    t_col = header.index(target)

    def _source() -> Iterator[Item]:
        with _open() as fh:
            reader = csv.reader(fh)
            next(reader)
            for line_no, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise ValueError(
                        f"{path}:{line_no}: {len(row)} cells, header has {len(header)}"
                    )
                x = []
                for j, cell in enumerate(row):
                    if j != t_col:
                        v = _parse_cell(cell, f"{path}:{line_no}")
                        if v is None:
                            raise ValueError(f"{path}:{line_no}: empty feature {header[j]!r}")
                        x.append(v)
                y = _parse_cell(row[t_col], f"{path}:{line_no}")
                yield x, (int(y) if y is not None and y.is_integer() else y)

    return Dataset(path.name, None, len(header) - 1, "unknown", None, f"CSV file {path}", _source)


def load_dataset(name: str, *, target: str | None = None) -> Dataset:
    """A built-in data set by name, or a CSV file by path.

    Raises ``KeyError`` naming the built-in sets when ``name`` is neither.
    """
    if name in DATASETS:
        return DATASETS[name]
    if name.endswith((".csv", ".csv.gz")) or pathlib.Path(name).is_file():
        return from_csv(name, target=target)
    raise KeyError(f"unknown data set {name!r}; built-in: {', '.join(sorted(DATASETS))}")
