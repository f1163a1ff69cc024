"""Synthetic reproduction of the NEMSIS / SCAN claims (``docs/algorithms/nemsis.md``).

Part A (§6.4 reference numbers, acceptance): the §6.2 Gaussian generator, d = 10 (+ bias),
eta0 = 1, R_W = 10, hinge gradient, eps_train = 1/(2T), prior = training prevalence, test
n = 50,000, 8 seeds: NEMSIS-NS NegKLD at T = 500 and 20,000 for p in {0.05, 0.2, 0.5};
surrogate NEMSIS for comparison; BAKLD (C = 0.5) and Q_1.
Part B: SCAN-NS (s0 = 2000, growth 2, s' = s/4) on a 200k stream at p = 0.1, 5 seeds, test
CQReward / BKReward against the best threshold on the informative direction.
Part C (Fig. 3 substitute): the Table-3 clones (n capped, 70/30 split, 20% of training for
validation), KLD of NEMSIS-NS (NegKLD, BAKLD), 1PMB, the batch structural-SVM substitute
and logistic regression + CC/ACC/PCC/PACC.

    python benchmarks/nemsis/synthetic.py [--seeds 8] [--clone-cap 50000] [--skip-clones] [--out F]

Writes benchmarks/results/nemsis/synthetic.md and synthetic_kld.png, and prints them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import (
    NEMSIS,
    SCAN,
    TABLE3,
    Q,
    add_bias,
    batch_structural_svm,
    best_threshold,
    gaussian,
    logistic_quantifiers,
    markdown_table,
    measures_of_scores,
    one_pass_minibatch,
    split,
    standardise,
    unit_direction,
    write,
)

D = 10
N_TEST = 50_000
PRIORS = (0.05, 0.2, 0.5)


def nemsis_run(measure: str, p: float, seed: int, T: int, **kw: object) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    u = unit_direction(rng, D)
    X, y = gaussian(rng, T, p, u)
    Xt, yt = gaussian(rng, N_TEST, p, u)
    model = NEMSIS(D, measure=measure, prior=float(np.mean(y > 0)), eps=1 / (2 * T), **kw)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    model.learn_many(X, [int(v) for v in y])
    out = measures_of_scores(model.decision_function(Xt), yt)
    out["us_per_step"] = 1e6 * (time.perf_counter() - t0) / T
    return out


def part_a(seeds: int) -> tuple[str, dict[str, float]]:
    rows, accept = [], {}
    configs = [
        ("NEMSIS-NS NegKLD", "negkld", {"ns": True}),
        ("NEMSIS (surrogate) NegKLD", "negkld", {"ns": False}),
        ("NEMSIS-NS BAKLD C=0.5", "bakld", {"C": 0.5}),
        ("NEMSIS-NS Q_1", "q", {"beta": 1.0}),
    ]
    for name, measure, kw in configs:
        for p in PRIORS:
            for T in (500, 20_000) if measure == "negkld" else (20_000,):
                res = [nemsis_run(measure, p, s, T, **kw) for s in range(seeds)]
                kld = np.array([r["kld"] for r in res])
                gap = np.array([abs(r["cc"] - r["prevalence"]) for r in res])
                ba = np.array([r["ba"] for r in res])
                q = np.array([r["q_beta"] for r in res])
                us = float(np.mean([r["us_per_step"] for r in res]))
                rows.append(
                    [name, p, T, kld.mean(), kld.max(), gap.max(), ba.min(), ba.max(), q.min(), us]
                )
                if name == "NEMSIS-NS NegKLD" and T == 20_000:
                    accept[f"p={p}"] = float(kld.mean())
                print(f"  {name} p={p} T={T}: mean KLD {kld.mean():.2e}", flush=True)
    header = [
        "method",
        "p",
        "T",
        "KLD mean",
        "KLD max",
        "max abs(p_hat-p)",
        "BA min",
        "BA max",
        "Q_1 min",
        "us/step",
    ]
    text = f"### A. Gaussian generator, d = 10, {seeds} seeds, test n = 50,000\n\n"
    text += markdown_table(header, rows)
    verdict = all(v <= 5e-4 for v in accept.values())
    text += (
        "\n\nAcceptance (NEMSIS-NS NegKLD, T = 20,000, mean KLD <= 5e-4): "
        + ", ".join(f"{k}: {v:.2e}" for k, v in accept.items())
        + f" -> {'PASS' if verdict else 'FAIL'}\n"
    )
    return text, accept


def part_b(seeds: int) -> tuple[str, float]:
    rows, worst = [], -np.inf
    for measure, f in (("cqreward", Q.cqreward), ("bkreward", Q.bkreward)):
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            u = unit_direction(rng, D)
            X, y = gaussian(rng, 200_000, 0.1, u)
            Xt, yt = gaussian(rng, N_TEST, 0.1, u)
            model = SCAN(D, measure=measure, s0=2000, prior=float(np.mean(y > 0)), eps=1e-5)
            t0 = time.perf_counter()
            model.learn_many(X, [int(v) for v in y])
            secs = time.perf_counter() - t0
            pred = np.where(model.decision_function(Xt) > 0, 1, -1)
            value = float(f(*Q.confusion_counts(yt, pred)))
            oracle = best_threshold(Xt @ u, yt, f)
            worst = max(worst, oracle - value)
            rows.append(
                [measure, seed, value, oracle, oracle - value, model.level_, model.epoch_, secs]
            )
            print(
                f"  SCAN-NS {measure} seed {seed}: {value:.4f} vs oracle {oracle:.4f}", flush=True
            )
    header = ["measure", "seed", "SCAN-NS test", "best threshold", "gap", "level v", "epochs", "s"]
    text = "### B. SCAN-NS, p = 0.1, 200k stream, s0 = 2000, growth 2, s' = s/4\n\n"
    text += markdown_table(header, rows)
    text += (
        f"\n\nAcceptance (SCAN-NS within 0.005 of the best-threshold value): worst gap "
        f"{worst:.4f} -> {'PASS' if worst <= 0.005 else 'FAIL'}\n"
    )
    return text, float(worst)


def part_c(seeds: int, cap: int) -> tuple[str, dict[str, list[float]]]:
    methods = [
        "NEMSIS-NS NegKLD",
        "NEMSIS-NS BAKLD",
        "1PMB NegKLD",
        "SVM-substitute NegKLD",
        "LR+CC",
        "LR+ACC",
        "LR+PCC",
        "LR+PACC",
    ]
    table: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    ba_table: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    for name, (n_full, d, p) in TABLE3.items():
        n = min(n_full, cap)
        for seed in range(seeds):
            rng = np.random.default_rng(1000 + seed)
            u = unit_direction(rng, d)
            X, y = gaussian(rng, n, p, u)
            X_tr, y_tr, X_te, y_te = split(X, y, rng)
            n_val = int(0.2 * y_tr.size)
            X_tr, X_te = standardise(X_tr, X_te)
            X_fit, y_fit, X_val, y_val = X_tr[n_val:], y_tr[n_val:], X_tr[:n_val], y_tr[:n_val]
            prior, T = float(np.mean(y_tr > 0)), y_tr.size
            res: dict[str, dict[str, float]] = {}
            for m, meas, kw in (
                ("NEMSIS-NS NegKLD", "negkld", {}),
                ("NEMSIS-NS BAKLD", "bakld", {"C": 0.5}),
            ):
                model = NEMSIS(d, measure=meas, prior=prior, eps=1 / (2 * T), **kw)  # type: ignore[arg-type]
                model.learn_many(X_tr, [int(v) for v in y_tr])
                res[m] = measures_of_scores(model.decision_function(X_te), y_te)
            w = one_pass_minibatch(X_tr, y_tr, "negkld", buffer=500, epochs=5)
            res["1PMB NegKLD"] = measures_of_scores(add_bias(X_te) @ w, y_te)
            w = batch_structural_svm(X_tr, y_tr, "negkld", iters=100)
            res["SVM-substitute NegKLD"] = measures_of_scores(add_bias(X_te) @ w, y_te)
            w_lr, cal = logistic_quantifiers(X_fit, y_fit, X_val, y_val)
            s_te = add_bias(X_te) @ w_lr
            lr_base = measures_of_scores(s_te, y_te)
            truth = float(np.mean(y_te > 0))
            for method in ("cc", "acc", "pcc", "pacc"):
                est = cal.estimate(s_te, method)
                res[f"LR+{method.upper()}"] = {
                    "kld": float(Q.kld(truth, est, y_te.size)),
                    "ba": lr_base["ba"],
                }
            for m in methods:
                table[m].setdefault(name, []).append(res[m]["kld"])
                ba_table[m].setdefault(name, []).append(res[m]["ba"])
        print(f"  clone {name} done", flush=True)
    rows = [[m] + [float(np.mean(table[m][k])) for k in TABLE3] for m in methods]
    rows_ba = [[m] + [float(np.mean(ba_table[m][k])) for k in TABLE3] for m in methods]
    hdr = ["method"] + [f"synth-{k} ({100 * v[2]:.2f}%)" for k, v in TABLE3.items()]
    text = (
        f"### C. Table-3 clones (n capped at {cap}, {seeds} seeds): "
        "test KLD_eps (lower is better)\n\n"
        + markdown_table(hdr, rows)
        + "\n\nTest BA of the same models (LR rows: the classifier under all four estimators)\n\n"
        + markdown_table(hdr, rows_ba)
        + "\n"
    )
    return text, {m: [float(np.mean(table[m][k])) for k in TABLE3] for m in methods}


def plot_clones(kld: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import RESULTS

    from benchmarks._report import save_figure

    prev = [v[2] for v in TABLE3.values()]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m, vals in kld.items():
        ax.plot(prev, np.maximum(vals, 1e-7), marker="o", label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("positive rate of the clone (log)")
    ax.set_ylabel("test KLD_eps (log, lower is better)")
    ax.set_title("Fig. 3 substitute: KLD on the Table-3 clones")
    ax.legend(fontsize=7)
    save_figure(fig, RESULTS / "synthetic_kld.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--scan-seeds", type=int, default=5)
    ap.add_argument("--clone-seeds", type=int, default=3)
    ap.add_argument("--clone-cap", type=int, default=50_000)
    ap.add_argument("--skip-clones", action="store_true")
    ap.add_argument("--out", default="synthetic.md", help="file name under results/nemsis")
    args = ap.parse_args()
    t0 = time.time()
    text_a, _ = part_a(args.seeds)
    text_b, _ = part_b(args.scan_seeds)
    parts = ["## NEMSIS / SCAN synthetic reproduction\n", text_a, text_b]
    if not args.skip_clones:
        text_c, kld = part_c(args.clone_seeds, args.clone_cap)
        parts.append(text_c)
        plot_clones(kld)
    parts.append(f"\n(total {time.time() - t0:.0f} s)\n")
    write(args.out, "\n".join(parts))


if __name__ == "__main__":
    main()
