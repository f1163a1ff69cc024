"""The replay data sets: shapes, labels, the generators' defining relations, CSV files."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from clients.datasets import (
    DATASETS,
    MissingDependencyError,
    _require,
    drift_comparators,
    load_dataset,
    prevalence_schedule,
)

BINARY_TASKS = ("classification", "quantification")


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_builtin_yields_finite_vectors_of_its_dimension(name: str) -> None:
    ds = DATASETS[name]
    items = list(ds.stream(limit=400))
    assert len(items) == min(400, ds.n or 400)
    X = np.array([x for x, _ in items])
    assert X.shape[1] == ds.dim and np.isfinite(X).all()
    ys = [y for _, y in items]
    if ds.task in BINARY_TASKS:
        assert set(ys) <= {-1, 1} and len(set(ys)) == 2
    else:
        assert all(isinstance(y, float) and math.isfinite(y) for y in ys)
    assert ds.kind and ds.description


@pytest.mark.parametrize("name", ["trump-approval", "water-flow", "phishing"])
def test_river_streams_have_their_full_length(name: str) -> None:
    ds = DATASETS[name]
    assert sum(1 for _ in ds.stream()) == ds.n


def test_sp500_is_index_tracking_on_twenty_named_stocks() -> None:
    ds = load_dataset("sp500")
    assert ds.kind == "apas" and len(ds.feature_names or ()) == 20
    items = list(ds.stream())
    assert len(items) == ds.n
    X = np.array([x for x, _ in items])
    y = np.array([y for _, y in items])
    # the index is a cap-weighted basket of 500 stocks: our 20 explain much of it, not all
    corr = np.corrcoef(X.mean(axis=1), y)[0, 1]
    assert 0.7 < corr < 0.99
    assert np.abs(X).max() < 1.0  # simple daily returns, not prices


def test_prevalence_schedules() -> None:
    steps = prevalence_schedule(400, "steps")
    assert [steps[i * 100] for i in range(4)] == [0.2, 0.5, 0.8, 0.35]
    lin = prevalence_schedule(101, "linear")
    assert lin[0] == pytest.approx(0.1) and lin[-1] == pytest.approx(0.9)
    sine = prevalence_schedule(1000, "sine")
    assert sine.min() >= 0.1 - 1e-12 and sine.max() <= 0.9 + 1e-12
    with pytest.raises(ValueError, match="schedule"):
        prevalence_schedule(10, "bogus")


@pytest.mark.parametrize("name", ["breast-cancer", "digits", "synth-prevalence"])
def test_positive_rate_follows_the_drift_schedule(name: str) -> None:
    ds = DATASETS[name]
    ys = np.array([y for _, y in ds.stream()])
    quarters = np.array_split(ys == 1, 4)
    for observed, target in zip(quarters, (0.2, 0.5, 0.8, 0.35), strict=True):
        # binomial sd at n >= 500 is <= 0.023: 0.08 is > 3 sd
        assert abs(observed.mean() - target) < 0.08, (name, observed.mean(), target)


def test_unlabelled_fraction_and_seed() -> None:
    ds = DATASETS["synth-prevalence"]
    ys = [y for _, y in ds.stream(unlabelled=0.3, seed=5)]
    share = sum(y is None for y in ys) / len(ys)
    assert 0.27 < share < 0.33
    again = [y for _, y in ds.stream(unlabelled=0.3, seed=5)]
    assert again == ys
    other = [y for _, y in ds.stream(unlabelled=0.3, seed=6)]
    assert other != ys
    with pytest.raises(ValueError, match="no option"):
        list(ds.stream(bogus=1))


@pytest.mark.parametrize("scenario", ["static", "jumps", "walk", "rotate"])
def test_drift_generators_follow_their_comparator(scenario: str) -> None:
    ds = DATASETS[f"synth-drift-{scenario}"]
    items = list(ds.stream(T=3000))
    X = np.array([x for x, _ in items])
    y = np.array([y for _, y in items])
    U = drift_comparators(ds.options["scenario"], 3000, 10, 0)
    residual = y - np.einsum("td,td->t", X, U)
    assert residual.std() == pytest.approx(0.1, rel=0.1)  # sigma = 0.1
    norms = np.linalg.norm(U, axis=1)
    if scenario != "walk":
        assert np.allclose(norms, 1.0)


def test_jumps_change_the_comparator_every_2000_rounds() -> None:
    U = drift_comparators("jumps_2000", 6000, 10, 0)
    changes = np.flatnonzero(np.any(np.diff(U, axis=0) != 0, axis=1)) + 1
    assert changes.tolist() == [2000, 4000]


def test_noisy_labels_flip_the_asked_fraction() -> None:
    items = list(DATASETS["synth-noisy-labels"].stream(noise=0.0))
    X = np.array([x for x, _ in items])
    y = np.array([y for _, y in items])
    # clean labels: separable by the line x2 = x1 (z2 = (x2 - x1)/sqrt(2) >= 0)
    assert np.all(np.where(X[:, 1] - X[:, 0] >= 0, 1, -1) == y)
    noisy = np.array([y for _, y in DATASETS["synth-noisy-labels"].stream(noise=0.1)])
    assert 0.08 < np.mean(noisy != y) < 0.12


def test_index_generator_is_a_noisy_convex_combination() -> None:
    items = list(DATASETS["synth-index"].stream())
    X = np.array([x for x, _ in items])
    y = np.array([y for _, y in items])
    w, *_ = np.linalg.lstsq(X, y, rcond=None)
    assert abs(w.sum() - 1.0) < 0.05 and w.min() > -0.05  # w* on the simplex, recovered
    assert np.std(y - X @ w) == pytest.approx(1e-3, rel=0.1)  # delta


def test_csv_files(tmp_path) -> None:
    path = tmp_path / "stream.csv"
    path.write_text("a,b,y\n1,2,3.5\n0.5,-1,\n4,5,1\n")
    ds = load_dataset(str(path))
    assert ds.kind is None and ds.dim == 2
    assert list(ds.stream()) == [([1.0, 2.0], 3.5), ([0.5, -1.0], None), ([4.0, 5.0], 1)]
    by_name = load_dataset(str(path), target="a")
    assert next(iter(by_name.stream())) == ([2.0, 3.5], 1)
    gz = tmp_path / "stream.csv.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write("x1,x2,label\n1,2,-1\n")
    assert list(load_dataset(str(gz)).stream()) == [([1.0, 2.0], -1)]


def test_csv_errors_name_the_line(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,y\n1,2\nfoo,3\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: 'foo' is not a number"):
        list(load_dataset(str(bad)).stream())
    with pytest.raises(ValueError, match="no column"):
        load_dataset(str(bad), target="zzz")
    with pytest.raises(FileNotFoundError):
        load_dataset(str(tmp_path / "missing.csv"))


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(KeyError, match="trump-approval"):
        load_dataset("no-such-set")


def test_missing_optional_dependency_says_what_to_install() -> None:
    with pytest.raises(MissingDependencyError, match="pip install"):
        _require("no_such_package_for_onlinepredict", "demo")
