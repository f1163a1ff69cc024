"""Prior drift (Fig. 4 substitute, ``docs/algorithms/nemsis.md``).

Train at the clone's prior p (synth-Adult 23.9%, synth-Letter 3.9%; §6.2 Gaussian clones,
n capped at 50k, 70/30 split); for each relative change delta of the test prior set
p' = min(0.95, p (1 + delta)) and resample a test set of the original test size with
replacement from the class-conditional test pools (pure label shift). Report KLD_eps of CC
and ACC for NEMSIS-NS (NegKLD, BAKLD C = 0.5, Q_1), 1PMB and logistic regression.
ACC/PACC of the NEMSIS learners use the learner's own calibration window (the last 1000
prequential labelled scores, ``quantify(X, method="acc")``).

Streaming variant: after training, unlabelled events arrive with a piecewise-constant prior;
``learn(x, None)`` feeds the learner's window (W = 1000) and its windowed CC / ACC estimate
is compared to the true window prevalence (windowed KLD with eps = 1/2000).

    python benchmarks/nemsis/drift.py [--seeds 5]

Writes benchmarks/results/nemsis/drift.md and drift.png.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import (
    NEMSIS,
    RESULTS,
    TABLE3,
    Q,
    add_bias,
    gaussian,
    logistic_quantifiers,
    markdown_table,
    one_pass_minibatch,
    split,
    standardise,
    unit_direction,
    write,
)

from learners.quantification import estimators as E

DELTAS = (-0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0)
CAP = 50_000


def resample(rng: np.random.Generator, X: np.ndarray, y: np.ndarray, p: float, n: int):  # type: ignore[no-untyped-def]
    """Footnote 4: each item positive with probability p, drawn uniformly from its pool."""
    pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
    is_pos = rng.random(n) < p
    idx = np.where(is_pos, rng.choice(pos, n), rng.choice(neg, n))
    return X[idx], y[idx]


def run_dataset(name: str, seeds: int) -> tuple[dict[str, np.ndarray], float]:
    n_full, d, p = TABLE3[name]
    out: dict[str, list[float]] = {}
    for seed in range(seeds):
        rng = np.random.default_rng(2000 + seed)
        u = unit_direction(rng, d)
        X, y = gaussian(rng, min(n_full, CAP), p, u)
        X_tr, y_tr, X_te, y_te = split(X, y, rng)
        X_tr, X_te = standardise(X_tr, X_te)
        n_val = int(0.2 * y_tr.size)
        prior, T = float(np.mean(y_tr > 0)), y_tr.size
        scorers: dict[str, object] = {}
        for label, meas, kw in (
            ("NEMSIS-NS NegKLD", "negkld", {}),
            ("NEMSIS-NS BAKLD", "bakld", {"C": 0.5}),
            ("NEMSIS-NS Q_1", "q", {}),
        ):
            m = NEMSIS(d, measure=meas, prior=prior, eps=1 / (2 * T), **kw)  # type: ignore[arg-type]
            m.learn_many(X_tr, [int(v) for v in y_tr])
            scorers[label] = m
        w_1pmb = one_pass_minibatch(X_tr, y_tr, "negkld", epochs=5)
        w_lr, cal_lr = logistic_quantifiers(X_tr[n_val:], y_tr[n_val:], X_tr[:n_val], y_tr[:n_val])
        for delta in DELTAS:
            p_new = min(0.95, prior * (1 + delta))
            Xs, ys = resample(rng, X_te, y_te, p_new, y_te.size)
            truth = float(np.mean(ys > 0))
            row: dict[str, float] = {}
            for label, m in scorers.items():
                for method in ("cc", "acc"):
                    est = m.quantify(Xs, method=method)  # type: ignore[attr-defined]
                    row[f"{label} {method.upper()}"] = float(Q.kld(truth, est, ys.size))
            row["1PMB CC"] = float(Q.kld(truth, E.cc(add_bias(Xs) @ w_1pmb), ys.size))
            s_lr = add_bias(Xs) @ w_lr
            for method in ("cc", "acc", "pacc"):
                row[f"LR {method.upper()}"] = float(
                    Q.kld(truth, cal_lr.estimate(s_lr, method), ys.size)
                )
            for k, v in row.items():
                out.setdefault(k, []).append(v)
    res = {
        k: np.array(v, dtype=float).reshape(seeds, len(DELTAS)).mean(axis=0) for k, v in out.items()
    }
    return res, p


def streaming(seed: int = 0) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """BAKLD NEMSIS-NS trained at p = 0.2, then unlabelled segments at other priors."""
    rng = np.random.default_rng(seed)
    d = 10
    u = unit_direction(rng, d)
    X, y = gaussian(rng, 20_000, 0.2, u)
    m = NEMSIS(d, measure="bakld", C=0.5, prior=float(np.mean(y > 0)), eps=1 / 40_000, window=1000)
    m.learn_many(X, [int(v) for v in y])
    segments = (0.2, 0.05, 0.4, 0.6, 0.1)
    truth, cc, acc = [], [], []
    rows = []
    for p_seg in segments:
        Xs, ys = gaussian(rng, 3000, p_seg, u)
        for i, x in enumerate(Xs):
            m.learn(x, None)
            if (i + 1) % 250 == 0:
                n = min(i + 1, 1000)
                truth.append(float(np.mean(ys[i + 1 - n : i + 1] > 0)))
                cc.append(m.window_prevalence("cc"))
                acc.append(m.window_prevalence("acc"))
        t = float(np.mean(ys[-1000:] > 0))
        rows.append(
            [
                p_seg,
                t,
                cc[-1],
                acc[-1],
                float(Q.kld(t, cc[-1], 1000)),
                float(Q.kld(t, acc[-1], 1000)),
            ]
        )
    text = markdown_table(
        ["segment prior", "true (last 1000)", "window CC", "window ACC", "KLD CC", "KLD ACC"], rows
    )
    return text, np.array(truth), np.array(cc), np.array(acc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    parts = [f"## Prior drift (Fig. 4 substitute), {args.seeds} seeds, mean test KLD_eps\n"]
    for ax, name in zip(axes[:2], ("Adult", "Letter"), strict=True):
        res, p = run_dataset(name, args.seeds)
        rows = [[k] + [float(v) for v in vals] for k, vals in res.items()]
        hdr = ["method"] + [f"{int(100 * dl):+d}%" for dl in DELTAS]
        parts.append(
            f"### synth-{name} (training prior {p:.4f})\n\n" + markdown_table(hdr, rows) + "\n"
        )
        for k, vals in res.items():
            style = "--" if k.endswith("ACC") else "-"
            ax.plot([100 * dl for dl in DELTAS], np.maximum(vals, 1e-6), style, marker="o", label=k)
        ax.set_yscale("log")
        ax.set_xlabel("relative change of the test prior (%)")
        ax.set_ylabel("KLD_eps (log)")
        ax.set_title(f"synth-{name}")
        print(f"  {name} done", flush=True)
    axes[0].legend(fontsize=6)
    text, truth, cc, acc = streaming()
    parts.append(
        "### Streaming: BAKLD NEMSIS-NS trained at p = 0.2, unlabelled segments of 3000 events,"
        " window W = 1000\n\n" + text + "\n"
    )
    ax = axes[2]
    steps = np.arange(1, truth.size + 1) * 250
    ax.plot(steps, truth, "k-", label="true window prevalence")
    ax.plot(steps, cc, label="window CC")
    ax.plot(steps, acc, label="window ACC")
    ax.set_xlabel("unlabelled events")
    ax.set_ylabel("prevalence")
    ax.set_title("windowed prevalence under a changing prior")
    ax.legend(fontsize=7)
    save_figure(fig, RESULTS / "drift.png", dpi=110)
    write("drift.md", "\n".join(parts))


if __name__ == "__main__":
    main()
