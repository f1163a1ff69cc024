"""Measure versus training time against the offline baselines (Figs. 1, 5, 6 substitutes,
``docs/algorithms/nemsis.md``).

On the synth-IJCNN (9.57%, d = 22) and synth-Adult (23.9%, d = 123) clones (n capped at
50k, 70/30 split, z-scored), each method is evaluated on the test set at regular intervals
during training; the x axis is training time only (evaluation excluded). Measures:
NegKLD (Fig. 1: NEMSIS-NS, NEMSIS, 1PMB, SVM-substitute), Q_1 (Fig. 5) and CQReward
(Fig. 6: SCAN-NS, SCAN). 1PMB: buffer 500, 5 passes; SVM-substitute: 100 full-batch
subgradient iterations of the 1-slack structural objective. Times are all pure Python +
numpy, so they compare within this implementation only.

    python benchmarks/nemsis/curves.py [--seed 0]

Writes benchmarks/results/nemsis/curves.md and curves.png.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import (
    NEMSIS,
    RESULTS,
    SCAN,
    TABLE3,
    add_bias,
    batch_structural_svm,
    gaussian,
    markdown_table,
    measures_of_scores,
    one_pass_minibatch,
    split,
    standardise,
    train_online,
    unit_direction,
    write,
)

CAP = 50_000
KEY = {"negkld": "kld", "q": "q_beta", "cqreward": "cqreward"}


def value(res: dict[str, float], measure: str) -> float:
    return -res["kld"] if measure == "negkld" else res[KEY[measure]]


def curves_for(name: str, seed: int) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    n_full, d, p = TABLE3[name]
    rng = np.random.default_rng(4000 + seed)
    u = unit_direction(rng, d)
    X, y = gaussian(rng, min(CAP, n_full), p, u)
    X_tr, y_tr, X_te, y_te = split(X, y, rng)
    X_tr, X_te = standardise(X_tr, X_te)
    Xb_te = add_bias(X_te)
    prior, T = float(np.mean(y_tr > 0)), y_tr.size
    out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for measure in ("negkld", "q", "cqreward"):
        cur: dict[str, tuple[list[float], list[float]]] = {}
        online = (
            [("SCAN-NS", True), ("SCAN", False)]
            if measure == "cqreward"
            else [("NEMSIS-NS", True), ("NEMSIS", False)]
        )
        for label, ns in online:
            if measure == "cqreward":
                model: NEMSIS | SCAN = SCAN(d, ns=ns, s0=T // 16, prior=prior, eps=1 / (2 * T))
            else:
                model = NEMSIS(d, measure=measure, ns=ns, prior=prior, eps=1 / (2 * T))
            xs, vs = [], []
            for secs, _ in train_online(model, X_tr, y_tr, chunk=1000):
                xs.append(secs)
                vs.append(value(measures_of_scores(model.decision_function(X_te), y_te), measure))
            cur[label] = (xs, vs)
        for label, fn, kw in (
            ("1PMB", one_pass_minibatch, {"buffer": 500, "epochs": 5}),
            ("SVM-substitute", batch_structural_svm, {"iters": 100}),
        ):
            xs, vs = [], []
            count = [0]

            def check(
                w: np.ndarray, secs: float, xs=xs, vs=vs, count=count, measure=measure
            ) -> None:  # type: ignore[no-untyped-def]
                count[0] += 1
                if count[0] % 5 == 0:
                    xs.append(secs)
                    vs.append(value(measures_of_scores(Xb_te @ w, y_te), measure))

            fn(X_tr, y_tr, measure, checkpoint=check, **kw)  # type: ignore[operator]
            cur[label] = (xs, vs)
        out[measure] = cur
        print(f"  {name} {measure} done", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    names = ("IJCNN", "Adult")
    titles = {"negkld": "NegKLD (Fig. 1)", "q": "Q_1 (Fig. 5)", "cqreward": "CQReward (Fig. 6)"}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    rows = []
    for i, name in enumerate(names):
        res = curves_for(name, args.seed)
        for j, measure in enumerate(("negkld", "q", "cqreward")):
            ax = axes[i, j]
            for label, (xs, vs) in res[measure].items():
                ax.plot(xs, vs, label=label)
                k = max(1, len(vs) // 10)
                rows.append(
                    [
                        f"synth-{name}",
                        titles[measure],
                        label,
                        float(np.mean(vs[-k:])),
                        float(xs[-1]),
                        _time_to(xs, vs, measure),
                    ]
                )
            ax.set_xscale("log")
            ax.set_xlabel("training seconds (log)")
            ax.set_ylabel(titles[measure].split(" (")[0] + " on test")
            ax.set_title(f"synth-{name}: {titles[measure]}")
            if measure == "negkld":
                ax.set_ylim(-0.05, 0.002)
            ax.legend(fontsize=7)
    save_figure(fig, RESULTS / "curves.png", dpi=110)
    hdr = ["data", "measure", "method", "final value (last 10%)", "train s", "s to 99% of final"]
    write(
        "curves.md",
        f"## Measure vs training time (seed {args.seed})\n\n" + markdown_table(hdr, rows) + "\n",
    )


def _time_to(xs: list[float], vs: list[float], measure: str) -> float:
    """First time the curve is within 1% of the range of its final value (NegKLD: within
    1e-3 of the final NegKLD)."""
    final = float(np.mean(vs[-max(1, len(vs) // 10) :]))
    tol = 1e-3 if measure == "negkld" else 0.01 * abs(final)
    for x, v in zip(xs, vs, strict=True):
        if v >= final - tol:
            return float(x)
    return float(xs[-1])


if __name__ == "__main__":
    main()
