"""Reproduction of experiments E1-E6 (the paper has none; ``docs/algorithms/transductive.md``).

    python benchmarks/transductive/run.py            # E1, E2, E2b, E3, E4, E6 (~4 min)
    python benchmarks/transductive/run.py --only E1,E2

Prints one markdown table per experiment, next to the spec's reference numbers and the
tolerance, and writes them to benchmarks/results/transductive/results.md together with
transductive.png (regret curves and bars). E5 is not run (see benchmarks/README.md).
"""

from __future__ import annotations

import os

# one BLAS thread: the Gibbs sampler does many small factorisations (much faster, 2 cores)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from learners.transductive.offline.closed_form import (  # noqa: E402
    forward_predictions,
    hindsight_loss,
    o2b_predict,
)
from learners.transductive.offline.slab_1d import (  # noqa: E402
    bayes_mixture_1d,
    e3_stream,
    slab_logistic_1d,
    tg_logistic_1d,
)
from learners.transductive.regressor import TransductiveRegressor  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "transductive"
VAW_LAMS = (1e-4, 1e-2, 1.0, 1e2)


def transductive(X: np.ndarray, y: np.ndarray, **params: object) -> np.ndarray:
    model = TransductiveRegressor(X.shape[1], **params)  # type: ignore[arg-type]
    model.register(X)
    return np.array([model.learn(x, v).prediction for x, v in zip(X, y, strict=True)])


def sq(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.sum((y - p) ** 2))


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "ok" if ok else "**differs**"


# ---- E1 ------------------------------------------------------------------------------------
def e1(curves: dict) -> str:
    T = 1000
    ref_vaw = sum(((T + 1) / (T + t)) ** 2 for t in range(1, T + 1))
    ref_tr = 4 * sum(k**-2 for k in range(2, T + 2))
    rows = []
    for lam in VAW_LAMS:
        X = np.full((T, 1), math.sqrt(lam / T))
        y = np.ones(T)
        pv = forward_predictions(X, y, lam * np.eye(1))
        pt = transductive(X, y, lam=1.0 / T)
        rv, rt = sq(y, pv), sq(y, pt)
        curves.setdefault("E1", {})[lam] = (np.cumsum((y - pv) ** 2), np.cumsum((y - pt) ** 2))
        # spec tolerance: 1e-6 relative to the exact sums (the spec prints them truncated)
        ok = abs(rv - ref_vaw) <= 1e-6 * ref_vaw and abs(rt - ref_tr) <= 1e-6 * ref_tr
        rows.append([f"{lam:g}", f"{rv:.6f}", "500.6248", f"{rt:.6f}", "2.5758", verdict(ok)])
    rows.append(["exact sums", f"{ref_vaw:.6f}", "", f"{ref_tr:.6f}", "", ""])
    head = ["lambda_VAW", "VAW regret", "spec", "transductive regret", "spec", "match (1e-6 rel.)"]
    return "### E1: Proposition 7 instance (d = 1, T = 1000)\n\n" + md_table(head, rows)


# ---- E2 / E2b ------------------------------------------------------------------------------
E2_REF = {
    "transductive VAW": (7.56, 0.75, 9.23),
    "transductive VAW, clipped": (-14.09, 15.87, 4.97),
    "VAW lam=0.0001": (71.6, 70.5, None),
    "VAW lam=0.01": (91.9, 83.0, None),
    "VAW lam=1": (209.4, 124.5, None),
    "VAW lam=100": (244.7, 140.8, None),
    "clipped ridge lam=0.0001": (56.0, 78.2, None),
    "clipped ridge lam=0.01": (78.7, 89.4, None),
    "clipped ridge lam=1": (201.8, 131.1, None),
    "clipped ridge lam=100": (239.6, 145.4, None),
}


def e2_data(seed: int, heavy: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = np.array([1e-4, 1e-2, 1.0, 1e2, 1e4])
    Z = rng.normal(size=(2000, 5))
    w = rng.normal(size=5) / np.sqrt(5)
    eps = rng.normal(size=2000)
    X = Z * c
    if heavy:  # E2b: Pareto(1.5) row norms, drawn after eps; U ~ Uniform(0, 1]
        X = X * ((1.0 - rng.random(2000)) ** (-1 / 1.5))[:, None]
    return X, np.clip(Z @ w + 0.5 * eps, -1.0, 1.0)


def e2(heavy: bool, bars: dict) -> str:
    regrets: dict[str, list[float]] = {}
    for seed in range(20):
        X, y = e2_data(seed, heavy)
        best = hindsight_loss(X, y)
        runs = {
            "transductive VAW": transductive(X, y),
            "transductive VAW, clipped": transductive(X, y, clip=True),
        }
        for lam in VAW_LAMS:
            runs[f"VAW lam={lam:g}"] = forward_predictions(X, y, lam * np.eye(5))
        for lam in VAW_LAMS:
            runs[f"clipped ridge lam={lam:g}"] = forward_predictions(
                X, y, lam * np.eye(5), ridge=True, clip=1.0
            )
        for name, p in runs.items():
            regrets.setdefault(name, []).append(sq(y, p) - best)
    bound = 5 / 2000 * 2000 + 5 * math.log1p(2000 / 5)  # lam T Y^2 + d Y^2 log(1 + 1/lam)
    rows = []
    for name, vals in regrets.items():
        v = np.array(vals)
        got = f"{v.mean():.2f} ± {v.std():.2f} (max {v.max():.2f})"
        if heavy:
            extra = f"≤ bound on every seed: {bool(np.all(v <= bound))}" if "transd" in name else ""
            rows.append([name, got, extra])
            continue
        m, s, mx = E2_REF[name]
        ref = f"{m} ± {s}" + (f" (max {mx})" if mx is not None else "")
        # the spec's tolerance is ±1% on the means (0.05 absolute for the small one)
        ok = abs(v.mean() - m) <= max(0.01 * abs(m), 0.05)
        rows.append([name, got, ref, verdict(ok)])
    bars["E2b" if heavy else "E2"] = {k: float(np.mean(v)) for k, v in regrets.items()}
    if heavy:
        title = "### E2b: heavy-tailed rows (Pareto(1.5) row norms), 20 seeds"
        head = ["learner", "regret mean ± sd (max)", "Theorem 1"]
    else:
        title = "### E2: badly scaled Gaussian design (d = 5, T = 2000), 20 seeds"
        head = ["learner", "regret mean ± sd (max)", "spec", "match (±1%)"]
    rows.append(["Theorem 1 bound", f"{bound:.2f}", "34.97", ""][: len(head)])
    return f"{title}\n\n" + md_table(head, rows)


# ---- E3 ------------------------------------------------------------------------------------
E3_REF = {
    (50, "sep"): (34.66, 15.05, 2.18, 1.01),
    (50, "logit5"): (23.80, 6.85, 4.85, 2.89),
    (100, "sep"): (69.31, 23.81, 2.42, 1.01),
    (100, "logit5"): (45.74, 8.02, 6.00, 4.07),
    (200, "sep"): (138.63, 38.34, 2.41, 1.00),
    (200, "logit5"): (86.63, 8.58, 7.09, 4.90),
}


def e3_inf_loss(x: np.ndarray, y: np.ndarray) -> float:
    grid = 10.0 ** np.linspace(-3, 9, 20001)[::20]
    thetas = np.concatenate([[0.0], grid, -grid])
    return float(np.min(np.sum(np.logaddexp(0.0, -y[None, :] * thetas[:, None] * x), axis=1)))


def e3(bars: dict) -> str:
    rows = []
    kn_grid = np.linspace(-50, 50, 200001)
    for (T, case), ref in E3_REF.items():
        res = []
        for seed in range(3):
            x, y = e3_stream(T, case, seed)
            best = e3_inf_loss(x, y)

            def loss(lp: np.ndarray, y: np.ndarray = y) -> float:
                return -float(np.sum(np.where(y > 0, lp[:, 0], lp[:, 1])))

            kn = loss(bayes_mixture_1d(x, y, kn_grid, -(kn_grid**2) / 2)) - best
            tg = loss(tg_logistic_1d(x, y)) - best
            lp, expert_loss = slab_logistic_1d(x, y)
            res.append([kn, tg, loss(lp) - best, float(expert_loss.min()) - best])
        mean = np.mean(res, axis=0)
        bars.setdefault("E3", {})[(T, case)] = mean
        ok = bool(np.all(np.abs(mean - np.array(ref)) <= 0.05))
        cells = [f"{m:.2f} ({r})" for m, r in zip(mean, ref, strict=True)]
        rows.append([str(T), case, *cells, verdict(ok)])
    head = ["T", "case", "KN-iso (spec)", "TG (spec)", "SLAB (spec)", "best slab-expert (spec)"]
    return "### E3: logistic, tiny design scale, mean of 3 seeds\n\n" + md_table(
        [*head, "match (±0.05)"], rows
    )


# ---- E4 ------------------------------------------------------------------------------------
E4_REF = {0: (117.4, 100.0, 62.7, 61.1), 1: (113.5, 110.5, 65.3, 64.0)}


def e4_run(seed: int, d: int, s: int, T: int) -> list[float]:
    rng = np.random.default_rng(seed)
    c = 10 ** rng.uniform(-2, 2, d)
    Z = rng.normal(size=(T, d))
    supp = rng.choice(d, s, replace=False)
    signs = rng.choice([-1, 1], s)
    eps = rng.normal(size=T)
    w = np.zeros(d)
    w[supp] = 0.6 * signs
    X = Z * c
    y = np.clip(Z @ w + 0.3 * eps, -1.0, 1.0)
    best = hindsight_loss(X[:, supp], y)  # least squares on the true support
    tv = transductive(X, y)
    vaw1 = forward_predictions(X, y, np.eye(d), clip=1.0)
    model = TransductiveRegressor(d, mode="sparse", tau=math.sqrt(s / d), burn_in=10, sweeps=50)
    model.register(X)
    model.rng_state_ = json.dumps(rng.bit_generator.state)  # "continues on the same rng"
    raw = np.array([model.learn(x, v).prediction for x, v in zip(X, y, strict=True)])
    return [sq(y, p) - best for p in (tv, vaw1, raw, np.clip(raw, -1, 1))]


def e4() -> str:
    rows = []
    for seed, ref in E4_REF.items():
        got = e4_run(seed, 200, 2, 400)
        # ±5 for the Monte Carlo learners; the closed-form ones are deterministic (±0.1)
        ok = all(
            abs(g - r) <= (5.0 if i >= 2 else 0.1)
            for i, (g, r) in enumerate(zip(got, ref, strict=True))
        )
        rows.append(
            [str(seed), *[f"{g:.1f} ({r})" for g, r in zip(got, ref, strict=True)], verdict(ok)]
        )
    neg = [e4_run(seed, 50, 2, 200) for seed in (0, 1)]
    for seed, got in zip((0, 1), neg, strict=True):
        rows.append(
            [f"{seed} (d=50, T=200)", *[f"{g:.1f}" for g in got], "spec: ≈36-38 / - / ≈42-45"]
        )
    head = ["seed", "transductive VAW", "VAW(1) clipped", "sparse (raw)", "sparse (clipped)"]
    return "### E4: sparse regression (d = 200, s = 2, T = 400); (spec) in brackets\n\n" + md_table(
        [*head, "match"], rows
    )


# ---- E6 ------------------------------------------------------------------------------------
def e6() -> str:
    rows = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        c = np.array([1e-4, 1e-2, 1.0, 1e2, 1e4])
        n, m = 500, 2000
        Z = rng.normal(size=(n + m, 5))
        w = rng.normal(size=5) / np.sqrt(5)
        eps = rng.normal(size=n + m)
        X, y = Z * c, np.clip(Z @ w + 0.5 * eps, -1.0, 1.0)
        # population-best linear predictor, from a large independent sample of the same law
        Zp = rng.normal(size=(400_000, 5))
        yp = np.clip(Zp @ w + 0.5 * rng.normal(size=400_000), -1.0, 1.0)
        theta_star = np.linalg.lstsq(Zp * c, yp, rcond=None)[0]
        Xtr, ytr, Xte, yte = X[:n], y[:n], X[n:], y[n:]
        base = float(np.mean((yte - Xte @ theta_star) ** 2))
        f = np.array([o2b_predict(Xtr, ytr, x) for x in Xte])
        row = [str(seed), f"{float(np.mean((yte - f) ** 2)) - base:.4f}"]
        for lam in (1e-4, 1.0, 1e2):
            th = np.linalg.solve(Xtr.T @ Xtr + lam * np.eye(5), Xtr.T @ ytr)
            row.append(f"{float(np.mean((yte - Xte @ th) ** 2)) - base:.4f}")
        rows.append(row)
    head = ["seed", "O2B transductive VAW", "ridge 1e-4", "ridge 1", "ridge 1e2"]
    note = "dY² log(n/d)/n = 0.046 for d = 5, n = 500"
    return (
        "### E6: online-to-batch, excess test risk (n = 500, 2000 test points; "
        f"{note})\n\n" + md_table(head, rows)
    )


# ---- plots ---------------------------------------------------------------------------------
def plot(curves: dict, bars: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    for lam, (cv, ct) in curves.get("E1", {}).items():
        ax.plot(cv, label=f"VAW λ={lam:g}")
        ax.plot(ct, "--", label=f"transductive (x scale {lam:g})")
    ax.set(xlabel="t", ylabel="cumulative regret", title="E1: Proposition 7 instance", yscale="log")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax = axes[1]
    for key, marker in (("E2", "o"), ("E2b", "s")):
        if key in bars:
            names = list(bars[key])
            ax.plot(range(len(names)), [bars[key][k] for k in names], marker, label=key)
            ax.set_xticks(range(len(names)), names, rotation=70, fontsize=7)
    ax.axhline(34.97, color="k", lw=0.8, ls=":", label="Theorem 1 bound")
    ax.set(ylabel="mean regret (20 seeds)", title="E2 / E2b: badly scaled designs", yscale="symlog")
    ax.legend(fontsize=7)
    ax = axes[2]
    if "E3" in bars:
        for case, ls in (("sep", "-"), ("logit5", "--")):
            Ts = [T for (T, c) in bars["E3"] if c == case]
            vals = np.array([bars["E3"][(T, case)] for T in Ts])
            for j, name in enumerate(("KN-iso", "TG", "SLAB", "best expert")):
                ax.plot(Ts, vals[:, j], ls, marker="o", color=f"C{j}", label=f"{name} {case}")
    ax.set(xlabel="T", ylabel="regret", title="E3: logistic, x = 1e-3 z", yscale="log")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    save_figure(fig, OUT / "transductive.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="E1,E2,E2b,E3,E4,E6")
    args = parser.parse_args()
    which = args.only.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    curves: dict = {}
    bars: dict = {}
    runs = {
        "E1": lambda: e1(curves),
        "E2": lambda: e2(False, bars),
        "E2b": lambda: e2(True, bars),
        "E3": lambda: e3(bars),
        "E4": e4,
        "E6": e6,
    }
    sections = []
    for name in which:
        t0 = time.perf_counter()
        text = runs[name]()
        print(text + f"\n\n({name}: {time.perf_counter() - t0:.1f} s)\n", flush=True)
        sections.append(text)
    header = "# Transductive priors: reproduction of experiments E1-E6\n\n"
    header += "Generated by `python benchmarks/transductive/run.py`. Spec numbers in brackets.\n\n"
    (OUT / "results.md").write_text(header + "\n\n".join(sections) + "\n")
    plot(curves, bars)


if __name__ == "__main__":
    main()
