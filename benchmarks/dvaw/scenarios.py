"""Reproduce the dynamic regret of the discounted-VAW ensemble (``docs/algorithms/dvaw.md``).

Generators of §7.1 (exact draw order), algorithms of §7.2 (lambda = 1), the §7.4 table
(dynamic regret, mean over seeds) next to the spec's numbers, the acceptance checks, and
plots of regret curves and ensemble weights over time (seed 0) in benchmarks/results/dvaw/.

    python benchmarks/dvaw/scenarios.py [--seeds 3] [--T 20000] [--jobs 2] [--dvaw-grid] [--sa]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # bit-stable small BLAS, and 1 core per job
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clients.datasets import drift_comparators  # noqa: E402
from learners import build  # noqa: E402
from learners.dvaw_ensemble import expert_grid  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "dvaw"
SCENARIOS = ("static", "jumps_2000", "jumps_200", "walk", "rotate", "lowerbound")
SIGMA = 0.1
D = 10

# §7.4 indicative numbers (prototype, mean over seeds 0-2)
SPEC = {
    "VAW": (12, 9082, 9989, 817, 9993, 2507),
    "meta self/last": (5, 213, 1469, 36, 68, 2508),
    "meta self/zero": (4, 201, 1454, 28, 56, 2502),
    "meta external/last": (24, 820, 3337, 127, 504, 2508),
    "meta external/zero": (14, 657, 2794, 93, 352, 2501),
    "RLS 0.9": (65, 159, 980, 67, 68, 3708),
    "RLS 0.95": (30, 165, 1384, 34, 39, 3130),
    "RLS 0.99": (8, 499, 4508, 21, 174, 2627),
    "RLS 0.995": (5, 937, 6414, 30, 610, 2564),
    "RLS 0.999": (3, 3954, 9123, 113, 5834, 2516),
    "OGD const 0.003": (86, 1604, 7613, 123, 1555, None),
    "OGD const 0.01": (31, 509, 4488, 44, 195, None),
    "OGD const 0.03": (28, 211, 1978, 33, 49, None),
    "OGD sqrt 0.03": (80, 7245, 9754, 401, 9218, None),
    "OGD sqrt 0.1": (12, 3904, 8966, 115, 5560, None),
    "OGD sqrt 0.3": (8, 1501, 7212, 45, 1440, None),
}


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def generate(name: str, seed: int, T: int = 20_000, d: int = D):
    """Spec §7.1: returns X (T, d), y (T,), U (T, d) with y_t = <x_t, u_t> + eps_t."""
    if name == "lowerbound":
        rng = np.random.default_rng(seed)
        idx = np.arange(T) % d
        X = np.eye(d)[idx]
        y = 1.0 * 0.5 * rng.choice([-1, 1], size=T)  # Y * sigma_lb * c_t
        U = np.zeros((T, d))
        for k in range(0, T, d):  # u_t fits block k exactly
            blk = slice(k, min(k + d, T))
            u = np.zeros(d)
            u[idx[blk]] = y[blk]
            U[blk] = u
        return X, y, U
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    eps = SIGMA * rng.standard_normal(T)
    if name == "regime":  # §7.1 optional / §5.5: static first half, then jumps_256
        ru = np.random.default_rng(seed + 1000)
        half = T // 2
        u0 = unit(ru.standard_normal(d))
        us = np.array([unit(ru.standard_normal(d)) for _ in range(math.ceil(half / 256))])
        U = np.vstack([np.tile(u0, (half, 1)), us[np.arange(T - half) // 256]])
    else:  # the client's generator of the same sequences (the synth-drift-* datasets)
        U = drift_comparators(name, T, d, seed)
    y = np.einsum("td,td->t", X, U) + eps
    return X, y, U


def algorithms(T: int, dvaw_grid: bool, sa: bool) -> dict[str, tuple[str, dict]]:
    """Spec §7.2, lambda = 1; the meta with b = 2, horizon T and exact numerics."""
    algs: dict[str, tuple[str, dict]] = {"VAW": ("vaw", {"lam": 1.0})}
    for h in ("self", "external"):
        for r in ("last", "zero"):
            params = {"lam": 1.0, "base": 2.0, "horizon": T, "hint": h, "ref": r}
            algs[f"meta {h}/{r}"] = ("dvaw-ensemble", {**params, "stabilised": False})
    for g in (0.9, 0.95, 0.99, 0.995, 0.999):
        algs[f"RLS {g}"] = ("rls", {"forgetting": g, "delta": 1.0})
    for lr in (0.003, 0.01, 0.03):
        algs[f"OGD const {lr}"] = ("ogd", {"lr": lr, "schedule": "constant"})
    for lr in (0.03, 0.1, 0.3):
        algs[f"OGD sqrt {lr}"] = ("ogd", {"lr": lr, "schedule": "sqrt"})
    if dvaw_grid:
        for eta in expert_grid(D, T):
            g = eta / (1 + eta)
            algs[f"DVAW {g:.5f}"] = ("dvaw", {"gamma": g, "hint": "zero", "stabilised": False})
    if sa:
        algs["SA-plus self/last"] = (
            "dvaw-sa",
            {"horizon": T, "stabilised": False, "ref": "last"},
        )
    return algs


def run_one(job: tuple) -> dict:
    scenario, seed, T, name, kind, params, keep_curves = job
    X, y, U = generate(scenario, seed, T)
    learner = build(kind, D, **params)
    preds = np.empty(T)
    weights = []
    start = time.perf_counter()
    for t in range(T):
        rep = learner.learn(X[t], float(y[t]))
        preds[t] = rep.prediction
        if keep_curves and kind == "dvaw-ensemble" and t % 20 == 0:
            diag = rep.diagnostics
            weights.append([v for k, v in diag.items() if k.startswith("weight_")])
    us_per_round = (time.perf_counter() - start) / T * 1e6
    inst = 0.5 * (y - preds) ** 2 - 0.5 * (y - np.einsum("td,td->t", X, U)) ** 2
    out = {
        "scenario": scenario,
        "seed": seed,
        "name": name,
        "regret": float(inst.sum()),
        "us": us_per_round,
    }
    if keep_curves:
        out["curve"] = np.cumsum(inst)[::20].tolist()
        if weights:
            out["weights"] = weights
            out["etas"] = [0.0] + expert_grid(D, T)
    return out


def curve_algs(names: list[str]) -> set[str]:
    keep = {"VAW", "meta self/last", "meta self/zero", "meta external/last"}
    keep |= {n for n in names if n.startswith("RLS")}
    return keep & set(names)


def plot(results: list[dict], T: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    RESULTS.mkdir(parents=True, exist_ok=True)
    seed0 = [r for r in results if r["seed"] == 0 and "curve" in r]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, sc in zip(axes.flat, SCENARIOS, strict=True):
        for r in seed0:
            if r["scenario"] == sc:
                t = np.arange(len(r["curve"])) * 20 + 1
                style = "-" if r["name"].startswith(("meta", "VAW")) else ":"
                ax.plot(t, r["curve"], style, label=r["name"], lw=1.2)
        ax.set_title(sc)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlabel("t")
        ax.set_ylabel("dynamic regret R_t")
    axes.flat[0].legend(fontsize=7)
    save_figure(fig, RESULTS / "regret_curves.png", dpi=110)

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, sc in zip(axes.flat, SCENARIOS, strict=True):
        r = next(r for r in seed0 if r["scenario"] == sc and r["name"] == "meta self/last")
        w = np.array(r["weights"]).T
        im = ax.imshow(
            w, aspect="auto", origin="lower", extent=(1, T, -0.5, w.shape[0] - 0.5), vmin=0, vmax=1
        )
        ax.set_yticks(range(w.shape[0]))
        ax.set_yticklabels([f"{1 + e:.0f}" for e in r["etas"]], fontsize=6)
        ax.set_ylabel("expert memory 1 + eta (gamma = eta / (1 + eta))")
        ax.set_title(f"{sc}: meta self/last weights p_t")
        fig.colorbar(im, ax=ax)
        ax.set_xlabel("t")
    save_figure(fig, RESULTS / "ensemble_weights.png", dpi=110)


def table(results: list[dict], names: list[str]) -> dict[str, list[float]]:
    mean: dict[str, list[float]] = {}
    for n in names:
        mean[n] = [
            float(np.mean([r["regret"] for r in results if r["name"] == n and r["scenario"] == s]))
            for s in SCENARIOS
        ]
    return mean


def fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}"


def regime(seeds: int, jobs: int) -> None:
    """§5.5: faithful SA vs SA-plus vs the §4 meta on `regime` (d = 5, T = 8192, self/last)."""
    T, d = 8192, 5
    algs = {
        "meta self/last (§4)": (
            "dvaw-ensemble",
            {"horizon": T, "stabilised": False, "ref": "last"},
        ),
        "SA faithful (Thm F.1)": (
            "dvaw-sa",
            {"horizon": T, "augment": False, "stabilised": False, "ref": "last"},
        ),
        "SA-plus (§5.5)": (
            "dvaw-sa",
            {"horizon": T, "augment": True, "stabilised": False, "ref": "last"},
        ),
    }
    jobs_ = [(seed, n, k, p) for seed in range(seeds) for n, (k, p) in algs.items()]
    with Pool(jobs) as pool:
        res = pool.map(_run_regime, jobs_, chunksize=1)
    print(f"\nregime (d = {d}, T = {T}), dynamic regret, mean over seeds 0..{seeds - 1}")
    print("| algorithm | ours | spec §5.5 (prototype) |\n|---|---|---|")
    spec = {
        "meta self/last (§4)": "≈190",
        "SA faithful (Thm F.1)": "≈1990",
        "SA-plus (§5.5)": "≈192",
    }
    for n in algs:
        vals = [r for (s_, m, r) in res if m == n]
        print(f"| {n} | {np.mean(vals):.0f} | {spec[n]} |")


def _run_regime(job: tuple) -> tuple:
    seed, name, kind, params = job
    X, y, U = generate("regime", seed, 8192, 5)
    learner = build(kind, 5, **params)
    preds = np.array([learner.learn(x, float(v)).prediction for x, v in zip(X, y, strict=True)])
    regret = 0.5 * np.sum((y - preds) ** 2) - 0.5 * np.sum((y - np.einsum("td,td->t", X, U)) ** 2)
    return seed, name, float(regret)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..n-1 (spec table: 3)")
    ap.add_argument("--T", type=int, default=20_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--dvaw-grid", action="store_true", help="also single DVAW per grid gamma")
    ap.add_argument("--sa", action="store_true", help="also the SA-plus ensemble (§5.5)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--algs", default="", help="comma-separated name prefixes to run (default all)")
    ap.add_argument("--regime", action="store_true", help="only the §5.5 SA experiment")
    args = ap.parse_args()
    if args.regime:
        regime(args.seeds, args.jobs)
        return

    algs = algorithms(args.T, args.dvaw_grid, args.sa)
    if args.algs:
        prefixes = tuple(a.strip() for a in args.algs.split(","))
        algs = {n: a for n, a in algs.items() if n.startswith(prefixes)}
    names = list(algs)
    keep = curve_algs(names)
    jobs = [
        (sc, seed, args.T, n, kind, params, seed == 0 and n in keep)
        for sc in SCENARIOS
        for seed in range(args.seeds)
        for n, (kind, params) in algs.items()
    ]
    jobs.sort(key=lambda j: j[4] != "dvaw-ensemble")  # long jobs first
    t0 = time.time()
    with Pool(args.jobs) as pool:
        results = pool.map(run_one, jobs, chunksize=1)
    mean = table(results, names)

    print(f"dynamic regret, mean over seeds 0..{args.seeds - 1}, T = {args.T}, d = {D}")
    print("each cell: ours (spec §7.4)\n")
    print("| algorithm | " + " | ".join(SCENARIOS) + " | µs/round |")
    print("|---|" + "---|" * (len(SCENARIOS) + 1))
    for n in names:
        spec = SPEC.get(n)
        cells = [
            fmt(v) + (f" ({fmt(spec[i])})" if spec and spec[i] is not None else "")
            for i, v in enumerate(mean[n])
        ]
        us = np.mean([r["us"] for r in results if r["name"] == n])
        print(f"| {n} | " + " | ".join(cells) + f" | {us:.0f} |")
    for fam in ("RLS", "OGD", "DVAW"):
        members = [n for n in names if n.startswith(fam + " ")]
        if members:
            best = [min(mean[n][i] for n in members) for i in range(len(SCENARIOS))]
            print(f"| best {fam} in hindsight | " + " | ".join(fmt(v) for v in best) + " | |")

    rls = [n for n in names if n.startswith("RLS ")]
    variants = [n for n in ("meta self/last", "meta self/zero") if n in mean]
    if rls and variants:
        print("\nacceptance (self-confident ensemble): |ours - spec| <= 10% (+0.5 for the spec's")
        print("integer rounding); ours <= 1.5 x best fixed-forgetting RLS (jumps_200 exempt)")
    for n in variants if rls else []:
        failed = []
        for i, sc in enumerate(SCENARIOS):
            ours, spec = mean[n][i], SPEC[n][i]
            best_rls = min(mean[m][i] for m in rls)
            within = abs(ours - spec) <= 0.10 * spec + 0.5
            ratio = ours / best_rls
            vs_rls = ratio <= 1.5 or sc == "jumps_200"
            failed += [] if within else [f"{sc}: spec"]
            failed += [] if vs_rls else [f"{sc}: 1.5x RLS"]
            print(
                f"  {n:15s} {sc:11s} ours {ours:8.1f} spec {spec:6d} "
                f"dev {100 * (ours - spec) / spec:+6.1f}% [{'ok' if within else 'FAIL'}]  "
                f"/best RLS {ratio:5.2f} (spec {spec / min(SPEC[m][i] for m in rls):4.2f}) "
                f"[{'ok' if vs_rls else 'FAIL'}{' (exempt)' if sc == 'jumps_200' else ''}]"
            )
        print(f"  => {n}: {'all checks pass' if not failed else 'FAILS ' + ', '.join(failed)}")
    if rls and variants:
        print(
            "  (the shipped default is self/zero, the best meta of §7.4; self/last misses the 1.5x"
            " bound in static/walk/rotate, and so do the spec's own self/last numbers)"
        )
    print(f"({time.time() - t0:.0f} s)")

    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {"T": args.T, "seeds": args.seeds, "scenarios": SCENARIOS, "mean_regret": mean}
    (RESULTS / "scenarios.json").write_text(json.dumps(summary, indent=1))
    if not args.no_plots:
        plot(results, args.T)


if __name__ == "__main__":
    main()
