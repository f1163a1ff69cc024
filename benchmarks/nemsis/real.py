"""Bundled real data (``docs/algorithms/nemsis.md``): river Shuttle (7.2%), the river
Yeast prevalence ladder (Class14 1.4%, Class9 7.4%, Class10 10.5%, Class6 24.7%, Class1
31.5%, one feature space), sklearn breast_cancer (37.3%) and digits "0" vs rest (9.9%).

Protocol: stratified 70/30 split, 20% of training held out for validation (ACC/PCC/PACC
statistics of logistic regression), z-scored features, 5 seeds. Online methods make
min(25, ceil(20000 / n_train)) shuffled passes over the training part (one pass on Shuttle;
the paper's 1PMB runs 25 passes), eps_train = 1/(2 * steps), prior = training prevalence.
SCAN's first epoch is n_train * passes / 16 events. No hyperparameter tuning (eta0 = 1,
R_W = 10): the paper tunes on validation data, so these are untuned numbers.

    python benchmarks/nemsis/real.py [--seeds 5]

Writes benchmarks/results/nemsis/real.md and real.png.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from common import (
    NEMSIS,
    RESULTS,
    SCAN,
    Q,
    add_bias,
    batch_structural_svm,
    logistic_quantifiers,
    markdown_table,
    measures_of_scores,
    one_pass_minibatch,
    split,
    standardise,
    write,
)

YEAST_LADDER = ("Class14", "Class9", "Class10", "Class6", "Class1")


def load_all() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from river import datasets
    from sklearn.datasets import load_breast_cancer, load_digits

    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rows = list(datasets.Shuttle())
    keys = sorted(rows[0][0])
    X = np.array([[r[0][k] for k in keys] for r in rows], dtype=float)
    out["Shuttle"] = (X, np.array([1 if r[1] else -1 for r in rows]))
    rows = list(datasets.Yeast())
    keys = sorted(rows[0][0])
    X = np.array([[r[0][k] for k in keys] for r in rows], dtype=float)
    for c in YEAST_LADDER:
        out[f"Yeast-{c}"] = (X, np.array([1 if r[1][c] else -1 for r in rows]))
    bc = load_breast_cancer()
    out["breast_cancer"] = (bc.data, np.where(bc.target == 0, 1, -1))  # malignant = +1
    dg = load_digits()
    out["digits-0"] = (dg.data.astype(float), np.where(dg.target == 0, 1, -1))
    return out


METHODS = (
    "NEMSIS-NS NegKLD",
    "NEMSIS-NS BAKLD",
    "NEMSIS-NS Q_1",
    "SCAN-NS CQReward",
    "1PMB NegKLD",
    "SVM-substitute NegKLD",
    "LR+CC",
    "LR+ACC",
    "LR+PCC",
    "LR+PACC",
)


def evaluate(X: np.ndarray, y: np.ndarray, seed: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    X_tr, y_tr, X_te, y_te = split(X, y, rng)
    X_tr, X_te = standardise(X_tr, X_te)
    n_val = int(0.2 * y_tr.size)
    passes = min(25, math.ceil(20_000 / y_tr.size))
    order = np.concatenate([rng.permutation(y_tr.size) for _ in range(passes)])
    Xs, ys = X_tr[order], [int(v) for v in y_tr[order]]
    prior, steps = float(np.mean(y_tr > 0)), len(ys)
    d = X.shape[1]
    res: dict[str, dict[str, float]] = {}
    for label, meas, kw in (
        ("NEMSIS-NS NegKLD", "negkld", {}),
        ("NEMSIS-NS BAKLD", "bakld", {"C": 0.5}),
        ("NEMSIS-NS Q_1", "q", {}),
    ):
        m = NEMSIS(d, measure=meas, prior=prior, eps=1 / (2 * steps), **kw)  # type: ignore[arg-type]
        m.learn_many(Xs, ys)
        res[label] = measures_of_scores(m.decision_function(X_te), y_te)
    s = SCAN(d, s0=max(20, steps // 16), level_min=20, prior=prior, eps=1 / (2 * steps))
    s.learn_many(Xs, ys)
    res["SCAN-NS CQReward"] = measures_of_scores(s.decision_function(X_te), y_te)
    w = one_pass_minibatch(X_tr, y_tr, "negkld", buffer=min(500, y_tr.size // 4), epochs=passes)
    res["1PMB NegKLD"] = measures_of_scores(add_bias(X_te) @ w, y_te)
    w = batch_structural_svm(X_tr, y_tr, "negkld", iters=100)
    res["SVM-substitute NegKLD"] = measures_of_scores(add_bias(X_te) @ w, y_te)
    w_lr, cal = logistic_quantifiers(X_tr[n_val:], y_tr[n_val:], X_tr[:n_val], y_tr[:n_val])
    s_te = add_bias(X_te) @ w_lr
    base = measures_of_scores(s_te, y_te)
    truth = float(np.mean(y_te > 0))
    for method in ("cc", "acc", "pcc", "pacc"):
        est = cal.estimate(s_te, method)
        res[f"LR+{method.upper()}"] = {
            **base,
            "cc": est,
            "kld": float(Q.kld(truth, est, y_te.size)),
        }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    data = load_all()
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name, (X, y) in data.items():
        for seed in range(args.seeds):
            res = evaluate(X, y, seed)
            for m, r in res.items():
                cell = table.setdefault(name, {}).setdefault(m, {})
                for key in ("kld", "ba", "q_beta", "cqreward"):
                    cell.setdefault(key, []).append(r[key])
                cell.setdefault("gap", []).append(abs(r["cc"] - r["prevalence"]))
        print(f"  {name} done", flush=True)
    parts = [f"## Bundled real data, {args.seeds} seeds, test means\n"]
    hdr_names = list(data)
    prev = {k: float(np.mean(v[1] > 0)) for k, v in data.items()}
    for key, title in (
        ("kld", "KLD_eps (lower is better)"),
        ("gap", "abs(p_hat - p) of the estimate (lower is better)"),
        ("ba", "BA"),
        ("q_beta", "Q_1"),
        ("cqreward", "CQReward"),
    ):
        rows = [[m] + [float(np.mean(table[n][m][key])) for n in hdr_names] for m in METHODS]
        hdr = ["method"] + [f"{n} ({100 * prev[n]:.1f}%)" for n in hdr_names]
        parts.append(f"### {title}\n\n" + markdown_table(hdr, rows) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    ladder = [f"Yeast-{c}" for c in YEAST_LADDER]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for m in METHODS:
        axes[0].plot(
            [prev[n] for n in ladder],
            [max(1e-6, float(np.mean(table[n][m]["kld"]))) for n in ladder],
            marker="o",
            label=m,
        )
        axes[1].plot(
            [prev[n] for n in ladder],
            [float(np.mean(table[n][m]["ba"])) for n in ladder],
            marker="o",
            label=m,
        )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("Yeast label prevalence")
    axes[0].set_ylabel("test KLD_eps (log)")
    axes[1].set_xlabel("Yeast label prevalence")
    axes[1].set_ylabel("test BA")
    axes[0].legend(fontsize=6)
    axes[0].set_title("Yeast prevalence ladder (Fig. 3 substitute): KLD")
    axes[1].set_title("Yeast prevalence ladder: BA")
    save_figure(fig, RESULTS / "real.png", dpi=110)
    write("real.md", "\n".join(parts))


if __name__ == "__main__":
    main()
