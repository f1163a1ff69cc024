"""The discounted-VAW ensemble on river's real drifting regression streams (progressive RMSE).

Streams: TrumpApproval, WaterFlow, AirlinePassengers, ChickWeights (bundled with river).
Every model sees the same feature vector, built before y_t is revealed: an intercept plus the
stream's numeric features and/or lagged targets, standardised online (river StandardScaler,
transform then learn, so only the past is used). Predict, score, then learn (progressive
validation). Competitors: river's BayesianLinearRegression with smoothing (forgetting) and
our forgetting-factor RLS, each over a small grid with the best member in hindsight marked.

    python benchmarks/dvaw/real_streams.py
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from river import datasets, linear_model, preprocessing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from learners import build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "dvaw"


def lags(history: list[float], ks: tuple[int, ...]) -> dict[str, float]:
    """y_{t-k} for each k; missing lags repeat the oldest label seen (0 before any)."""
    out = {}
    for k in ks:
        if len(history) >= k:
            out[f"lag{k}"] = history[-k]
        else:
            out[f"lag{k}"] = history[0] if history else 0.0
    return out


def trump(x: dict, hist: list[float]) -> dict[str, float]:
    polls = {k: float(v) for k, v in x.items() if k != "ordinal_date"}
    return {**polls, **lags(hist, (1,))}


def waterflow(x: dict, hist: list[float]) -> dict[str, float]:
    hour = x["Time"].hour
    return {
        "sin_h": math.sin(2 * math.pi * hour / 24),
        "cos_h": math.cos(2 * math.pi * hour / 24),
        **lags(hist, (1, 2, 24)),
    }


def airline(x: dict, hist: list[float]) -> dict[str, float]:
    return lags(hist, (1, 12, 13))


def chick(x: dict, hist: list[float]) -> dict[str, float]:
    diet = {f"diet{d}": float(x["diet"] == d) for d in (1, 2, 3, 4)}
    return {"time": float(x["time"]), **diet, **lags(hist, (1,))}


STREAMS: dict[str, tuple[Callable[[], datasets.base.Dataset], Callable]] = {
    "TrumpApproval": (datasets.TrumpApproval, trump),
    "WaterFlow": (datasets.WaterFlow, waterflow),
    "AirlinePassengers": (datasets.AirlinePassengers, airline),
    "ChickWeights": (datasets.ChickWeights, chick),
}


def featurised(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    make, feats = STREAMS[name]
    scaler = preprocessing.StandardScaler()
    hist: list[float] = []
    rows, ys = [], []
    keys: list[str] = []
    for x, y in make():
        raw = feats(x, hist)
        keys = sorted(raw)
        z = scaler.transform_one(raw)  # past statistics only
        scaler.learn_one(raw)
        rows.append([1.0] + [float(z.get(k, 0.0)) for k in keys])
        ys.append(float(y))
        hist.append(float(y))
    return np.array(rows), np.array(ys), ["intercept", *keys]


def ours(kind: str, **params: object) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(X: np.ndarray, y: np.ndarray) -> np.ndarray:
        model = build(kind, X.shape[1], **params)
        return np.array([model.learn(x, float(v)).prediction for x, v in zip(X, y, strict=True)])

    return run


def river_blr(smoothing: float | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(X: np.ndarray, y: np.ndarray) -> np.ndarray:
        model = linear_model.BayesianLinearRegression(smoothing=smoothing)
        out = []
        for row, v in zip(X, y, strict=True):
            x = {f"f{i}": float(a) for i, a in enumerate(row)}
            out.append(model.predict_one(x))
            try:
                model.learn_one(x, float(v))
            except np.linalg.LinAlgError:  # river inverts the smoothed matrix directly
                print(
                    f"  river BLR smoothing={smoothing}: singular at t={len(out)}", file=sys.stderr
                )
                return np.full(len(y), np.nan)
        return np.array(out)

    return run


def models() -> Iterator[tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]]:
    yield "dvaw-ensemble self/last (default)", ours("dvaw-ensemble")
    yield "dvaw-ensemble self/zero", ours("dvaw-ensemble", ref="zero")
    yield "dvaw-ensemble external/last", ours("dvaw-ensemble", hint="external")
    yield "vaw", ours("vaw")
    for g in (0.8, 0.9, 0.95, 0.99, 1.0):
        yield f"rls {g}", ours("rls", forgetting=g)
    for s in (None, 0.5, 0.8, 0.9, 0.95, 0.99):
        yield f"river BLR smoothing={s}", river_blr(s)
    yield "last value y_{t-1}", lambda X, y: np.concatenate([[0.0], y[:-1]])


def main() -> None:
    table: dict[str, dict[str, float]] = {}
    for name in STREAMS:
        X, y, keys = featurised(name)
        print(f"{name}: T = {len(y)}, features = {keys}", file=sys.stderr)
        for label, run in models():
            pred = run(X, y)
            table.setdefault(label, {})[name] = float(np.sqrt(np.mean((y - pred) ** 2)))
    names = list(STREAMS)
    print("progressive RMSE (predict, then learn)\n")
    print("| model | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, row in table.items():
        cells = ["singular (fails)" if math.isnan(row[n]) else f"{row[n]:.3f}" for n in names]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for fam in ("rls ", "river BLR"):
        best = {
            n: np.nanmin([r[n] for lbl, r in table.items() if lbl.startswith(fam)]) for n in names
        }
        print(
            f"| best {fam.strip()} in hindsight | "
            + " | ".join(f"{best[n]:.3f}" for n in names)
            + " |"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "real_streams.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
