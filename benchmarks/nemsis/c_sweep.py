"""BAKLD CWeight sweep (Fig. 2 substitute, ``docs/algorithms/nemsis.md``).

NEMSIS-NS on BAKLD = C BA + (1 - C)(-KLD), C from 0 to 1 in steps of 0.05, on three data
sets: the §6.4 Gaussian (d = 10, p = 0.2, T = 20,000, test n = 50,000) and the synth-Adult
and synth-IJCNN clones (training capped at 20,000, 70/30 split). Test BA and KLD_eps are
reported separately, as in the paper's figure.

    python benchmarks/nemsis/c_sweep.py [--seeds 5]

Writes benchmarks/results/nemsis/c_sweep.md and c_sweep.png.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import (
    NEMSIS,
    RESULTS,
    TABLE3,
    gaussian,
    markdown_table,
    measures_of_scores,
    split,
    standardise,
    unit_direction,
    write,
)

CS = np.round(np.arange(0.0, 1.0001, 0.05), 2)


def dataset(name: str, seed: int):  # type: ignore[no-untyped-def]
    if name == "gauss-p0.2":
        rng = np.random.default_rng(seed)
        u = unit_direction(rng, 10)
        X, y = gaussian(rng, 20_000, 0.2, u)
        Xt, yt = gaussian(rng, 50_000, 0.2, u)
        return X, y, Xt, yt
    _, d, p = TABLE3[name]
    rng = np.random.default_rng(3000 + seed)
    u = unit_direction(rng, d)
    X, y = gaussian(rng, int(20_000 / 0.7), p, u)
    X_tr, y_tr, X_te, y_te = split(X, y, rng)
    X_tr, X_te = standardise(X_tr, X_te)
    return X_tr, y_tr, X_te, y_te


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    names = ("gauss-p0.2", "Adult", "IJCNN")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    parts = [f"## BAKLD C sweep (Fig. 2 substitute), NEMSIS-NS, {args.seeds} seeds, test means\n"]
    for ax, name in zip(axes, names, strict=True):
        ba = np.zeros((args.seeds, CS.size))
        kld = np.zeros((args.seeds, CS.size))
        for seed in range(args.seeds):
            X, y, Xt, yt = dataset(name, seed)
            for j, C in enumerate(CS):
                m = NEMSIS(
                    X.shape[1],
                    measure="bakld",
                    C=float(C),
                    prior=float(np.mean(y > 0)),
                    eps=1 / (2 * y.size),
                )
                m.learn_many(X, [int(v) for v in y])
                res = measures_of_scores(m.decision_function(Xt), yt)
                ba[seed, j], kld[seed, j] = res["ba"], res["kld"]
        rows = [
            [
                float(C),
                float(ba[:, j].mean()),
                float(ba[:, j].min()),
                float(kld[:, j].mean()),
                float(kld[:, j].max()),
            ]
            for j, C in enumerate(CS)
        ]
        title = name if name.startswith("gauss") else f"synth-{name}"
        parts.append(
            f"### {title}\n\n"
            + markdown_table(["C", "BA mean", "BA min", "KLD mean", "KLD max"], rows)
            + "\n"
        )
        ax.plot(CS, ba.mean(axis=0), "b-o", label="BA")
        ax.set_xlabel("C (weight of BA)")
        ax.set_ylabel("test BA", color="b")
        ax2 = ax.twinx()
        ax2.plot(CS, kld.mean(axis=0), "r-s", label="KLD")
        ax2.set_yscale("symlog", linthresh=1e-4)
        ax2.set_ylabel("test KLD_eps", color="r")
        ax.set_title(title)
        print(f"  {name} done", flush=True)
    save_figure(fig, RESULTS / "c_sweep.png", dpi=110)
    write("c_sweep.md", "\n".join(parts))


if __name__ == "__main__":
    main()
