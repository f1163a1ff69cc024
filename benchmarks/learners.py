"""Learner throughput: events/s of ``learn`` for every registered kind at d in {10, 100, 500},
against the peers a user would otherwise pick, measured in the same process run (issue 9).

Every cell runs for a CPU-time budget (``time.process_time``, so other load on this shared
machine distorts less; BLAS is pinned to one thread, see ``_bench``), after 3 untimed
warm-up events. Rows are the kind's own ``_test_stream`` as float64 arrays (the worker
passes lists; that conversion is measured in ``service.py``). Where a peer runs the same
algorithm its predictions are compared with ours on a fresh run; river's PARegressor is not
the same algorithm (its loss maps y to 2y - 1), so its disagreement is reported, not hidden.

    python benchmarks/learners.py [--budget 0.4] [--quick]

Prints the tables; writes benchmarks/results/learners.md and learners.png.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import _bench  # before numpy: pins BLAS threads
import _bench_peers as peers
import numpy as np
from _bench import RESULTS, fmt_rate, fmt_ratio, markdown_table, timed_rate, write

import learners
from learners import _accel

DIMS = (10, 100, 500)
#: rows generated per (kind, d); the timed loop cycles through them
N_ROWS = {10: 3000, 100: 1500, 500: 400}
#: events replayed to compare predictions with same-algorithm peers
N_CMP = {10: 300, 100: 200, 500: 40}
#: a cell whose projected time per event exceeds this is skipped (and says so)
SLOW_EVENT_S = 2.0
#: batch size of the learn_many measurement (the worker's max_poll_records default)
BATCH = 500

PA_PARAMS = {"variant": "pa1", "C": 1.0, "epsilon": 0.1}
#: hyperparameters where the defaults are not the variant the peers implement
PARAMS: dict[str, dict[str, Any]] = {"pa": PA_PARAMS}


@dataclass
class Cell:
    kind: str
    d: int
    rate: float | None = None  # events/s of ours
    events: int = 0
    note: str = ""
    sgd_rate: float | None = None
    peers: list[PeerResult] = field(default_factory=list)


@dataclass
class PeerResult:
    name: str
    rate: float | None
    same: bool
    max_diff: float | None = None
    rel_diff: float | None = None
    note: str = ""


def stream(kind: str, d: int) -> tuple[np.ndarray, list[Any]]:
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(d, N_ROWS[d], 0)
    return np.ascontiguousarray(X, dtype=np.float64), list(y)


def build(kind: str, d: int, X: np.ndarray, **override: Any) -> learners.Learner:
    cls = learners.REGISTRY[kind]
    learner = cls(d, **{**PARAMS.get(kind, {}), **override})
    learner._test_prepare(X)
    return learner


def time_ours(learner: learners.Learner, X: np.ndarray, y: list[Any], budget: float):
    rows = list(X)  # ndarray rows, as views
    # transductive learners predict only rows of their registered block, each once
    cycle = not hasattr(learner, "register")
    return timed_rate(lambda i: learner.learn(rows[i], y[i]), len(rows), budget, cycle=cycle)


def time_peer(peer: peers.Peer, n: int, budget: float) -> tuple[int, float]:
    return timed_rate(peer.learn, n, budget)


def compare(
    ours: Callable[[int], float], theirs: Callable[[int], float], n: int
) -> tuple[float, float]:
    """max |ours - theirs| and the same relative to max |theirs| over ``n`` fresh events."""
    a = np.array([ours(i) for i in range(n)])
    b = np.array([theirs(i) for i in range(n)])
    diff = float(np.max(np.abs(a - b)))
    return diff, diff / max(float(np.max(np.abs(b))), 1e-300)


# ---- closest peers per kind ---------------------------------------------------------------
def pa_peers(d, X, y):
    C, eps = PA_PARAMS["C"], PA_PARAMS["epsilon"]
    return [
        (lambda: peers.RiverPA(X, y, C=C, eps=eps), "prediction"),
        (
            lambda: peers.SklearnSGD(
                X,
                y,
                classifier=False,
                same=True,
                loss="epsilon_insensitive",
                epsilon=eps,
                learning_rate="pa1",
                eta0=C,
                penalty=None,
                fit_intercept=False,
            ),
            "prediction",
        ),
        (lambda: peers.NaivePA1(X, y, C=C, eps=eps), "prediction"),
    ]


def ogd_peers(d, X, y):
    return [
        (
            lambda: peers.SklearnSGD(
                X,
                y,
                classifier=False,
                same=True,
                loss="squared_error",
                learning_rate="constant",
                eta0=0.01,
                penalty=None,
                fit_intercept=False,
            ),
            "prediction",
        )
    ]


def vaw_peers(d, X, y):
    return [
        (lambda: peers.RiverBLR(X, y, lam=1.0, smoothing=None), "rls_mu"),
        (lambda: peers.NaiveDiscountedVAW(X, y, gamma=1.0, lam=1.0), "prediction"),
    ]


def dvaw_peers(d, X, y):
    return [
        (lambda: peers.RiverBLR(X, y, lam=1.0, smoothing=0.99), "rls_prediction"),
        (lambda: peers.NaiveDiscountedVAW(X, y, gamma=0.99, lam=1.0), "prediction"),
    ]


def rls_peers(d, X, y):
    return [(lambda: peers.RiverBLR(X, y, lam=1.0, smoothing=0.99), "prediction")]


def ensemble_peers(d, X, y):
    gammas = learners.REGISTRY["dvaw-ensemble"](d)._gamma
    return [(lambda: peers.RiverEWA(X, y, lam=1.0, gammas=gammas), None)]


def apas_peers(d, X, y):
    return [(lambda: peers.CvxpyPAS(X, y, lam=1e-2, eps=5e-4), "pas_prediction")]


def perceptron_peers(d, X, y):
    kw = {"loss": "perceptron", "learning_rate": "constant", "eta0": 1.0}
    return [(lambda: _sgd_clf(X, y, **kw), "margin")]


def pa_classifier_peers(d, X, y):
    kw = {"loss": "hinge", "learning_rate": "pa2", "eta0": 1.0}
    return [(lambda: _sgd_clf(X, y, **kw), "margin")]


def _sgd_clf(X, y, **kw):
    return peers.SklearnSGD(
        X, y, classifier=True, same=True, penalty=None, fit_intercept=False, **kw
    )


PEERS = {
    "pa": pa_peers,
    "ogd": ogd_peers,
    "vaw": vaw_peers,
    "dvaw": dvaw_peers,
    "rls": rls_peers,
    "dvaw-ensemble": ensemble_peers,
    "apas": apas_peers,
    "perceptron": perceptron_peers,
    "pa-classifier": pa_classifier_peers,
}


def ours_value(kind: str, d: int, X: np.ndarray, y: list[Any], what: str) -> Callable[[int], float]:
    """Our value comparable with the peer's prediction, on a fresh learner."""
    override = {"adaptive": False} if what == "pas_prediction" else {}
    learner = build(kind, d, X, **override)
    rows = list(X)

    def value(i: int) -> float:
        rep = learner.learn(rows[i], y[i])
        if what == "rls_prediction":
            return float(rep.diagnostics["rls_prediction"])
        if what == "rls_mu":  # VAW: y_hat = mu (1 - rho), rho = leverage
            return float(rep.prediction) / (1.0 - float(rep.diagnostics["leverage"]))
        if what == "margin":
            return float(rep.scores["margin"]) if rep.scores else float(rep.prediction)
        return float(rep.prediction)

    return value


# ---- the measurement ----------------------------------------------------------------------
def run_cell(kind: str, d: int, budget: float, prev: Cell | None) -> Cell:
    cell = Cell(kind, d)
    if prev is not None and prev.rate:
        projected = (d / prev.d) ** 2 / prev.rate  # at least O(d^2) per event
        if projected > SLOW_EVENT_S:
            cell.note = (
                f"skipped: projected >= {projected:.0f} s/event from"
                f" {fmt_rate(prev.rate)} ev/s at d={prev.d} (O(d^2) or worse per event)"
            )
            return cell
    X, y = stream(kind, d)
    t0 = time.perf_counter()
    learner = build(kind, d, X)
    init = time.perf_counter() - t0
    events, secs = time_ours(learner, X, y, budget)
    cell.rate, cell.events = events / secs, events
    if events == 1:
        cell.note = "one event over the budget: 1 event timed, first-call costs included"
    if init > 0.5:
        cell.note = "; ".join(filter(None, [cell.note, f"construction {init:.1f} s"]))
    for make, what in PEERS.get(kind, lambda *a: [])(d, X, y):
        p = make()
        n_ev, p_secs = time_peer(p, len(X), budget)
        res = PeerResult(p.name, n_ev / p_secs, p.same)
        if what is not None:
            n_cmp = min(N_CMP[d], len(X))
            res.max_diff, res.rel_diff = compare(
                ours_value(kind, d, X, y, what), make().learn_and_predict, n_cmp
            )
            res.note = f"{n_cmp} events" + (
                "; ours = RLS a-priori mu" if what.startswith("rls") else ""
            )
            if what == "pas_prediction":
                res.note += "; ours with adaptive=False (PAS)"
        cell.peers.append(res)
    return cell


def sgd_rates(budget: float) -> dict[tuple[str, int], float]:
    out = {}
    for d in DIMS:
        for task, kind, make in (
            ("regression", "pa", peers.sgd_regressor_generic),
            ("classification", "perceptron", peers.sgd_classifier_generic),
        ):
            X, y = stream(kind, d)
            p = make(X, y)
            n, secs = time_peer(p, len(X), budget)
            out[(task, d)] = n / secs
    return out


@dataclass
class ManyResult:
    kind: str
    d: int
    batch: int
    loop_rate: float
    many_rate: float
    identical: bool


def run_learn_many(kind: str, d: int, per_event_s: float, budget: float) -> ManyResult:
    X, y = stream(kind, d)
    batch = int(max(10, min(BATCH, len(X), budget / max(per_event_s, 1e-9))))
    Xb, yb = X[:batch], y[:batch]
    t_loop = t_many = math.inf
    for _ in range(2):  # best of two, alternating: one-shot timings catch load spikes
        a, b = build(kind, d, X), build(kind, d, X)
        t0 = time.process_time()
        loop = [a.learn(x, v) for x, v in zip(Xb, yb, strict=True)]
        t1 = time.process_time()
        many = b.learn_many(Xb, yb)
        t2 = time.process_time()
        t_loop, t_many = min(t_loop, t1 - t0), min(t_many, t2 - t1)
    same = all(
        (p.prediction == q.prediction) or (p.prediction != p.prediction)
        for p, q in zip(loop, many, strict=True)
    )
    return ManyResult(kind, d, batch, batch / t_loop, batch / t_many, same)


def pa_batched_vs_river(d: int, budget: float, rounds: int = 3) -> tuple[float, float]:
    """(pa ``learn_many`` ev/s, river ``PARegressor.learn_one`` ev/s), measured in
    alternating rounds so both see the same load: ``learn_many`` on consecutive batches of
    ``BATCH`` rows (the worker's call), one learner cycling through the stream after one
    untimed batch, like the ``learn`` cells."""
    X, y = stream("pa", d)
    batches = [(X[i : i + BATCH], y[i : i + BATCH]) for i in range(0, len(X), BATCH)]
    learner = build("pa", d, X)
    learner.learn_many(*batches[0])
    river = pa_peers(d, X, y)[0][0]()
    events = spent = river_events = river_spent = 0.0
    i = 1
    for _ in range(rounds):
        share = 0.0
        while share < budget / rounds:
            Xb, yb = batches[i % len(batches)]
            t0 = time.process_time()
            learner.learn_many(Xb, yb)
            share += time.process_time() - t0
            events += len(Xb)
            i += 1
        spent += share
        n, sec = timed_rate(river.learn, len(X), budget / rounds)
        river_events += n
        river_spent += sec
    return events / spent, river_events / river_spent


# ---- output -------------------------------------------------------------------------------
def throughput_table(cells: list[Cell], sgd: dict[tuple[str, int], float]) -> str:
    rows = []
    for c in cells:
        task = learners.REGISTRY[c.kind].task
        s = sgd.get((task, c.d))
        rows.append(
            [
                c.kind,
                c.d,
                fmt_rate(c.rate) if c.rate else "–",
                fmt_rate(s),
                fmt_ratio(c.rate, s),
                c.note,
            ]
        )
    header = ["kind", "d", "ours ev/s", "sklearn SGD partial_fit ev/s", "ours/SGD", "note"]
    return markdown_table(header, rows)


def peers_table(cells: list[Cell]) -> str:
    rows = []
    for c in cells:
        for p in c.peers:
            agree = "timing only (different algorithm)"
            if p.max_diff is not None:
                agree = f"max abs diff {p.max_diff:.1e} (rel {p.rel_diff:.1e})"
                if not p.same:
                    agree += ": DISAGREES, not the paper's update"
            rows.append(
                [
                    c.kind,
                    c.d,
                    p.name,
                    fmt_rate(c.rate),
                    fmt_rate(p.rate),
                    fmt_ratio(c.rate, p.rate),
                    "yes" if p.same else "no",
                    agree,
                    p.note,
                ]
            )
    header = ["kind", "d", "peer", "ours ev/s", "peer ev/s", "ours/peer", "same algorithm"]
    return markdown_table(header + ["predictions", "compared on"], rows)


def targets(cells: list[Cell], pa_many: tuple[float, float] | None = None) -> tuple[str, list[str]]:
    by = {(c.kind, c.d): c for c in cells}
    rows, lines = [], []

    def ratio_vs(kind: str, d: int, prefix: str) -> float | None:
        c = by.get((kind, d))
        if c is None or not c.rate:
            return None
        for p in c.peers:
            if p.name.startswith(prefix) and p.rate:
                return c.rate / p.rate
        return None

    def add(name: str, value: float | None, goal: str, ok: bool | None) -> None:
        shown = "–" if value is None else f"{value:.2f}"
        verdict = "not measured" if ok is None else ("MET" if ok else "NOT MET")
        rows.append([name, goal, shown, verdict])
        lines.append(f"{name}: {shown} (target {goal}) {verdict}")

    r = ratio_vs("pa", 100, "river PARegressor")
    add("pa / river PARegressor, d=100", r, ">= 10", None if r is None else r >= 10)
    r = pa_many[0] / pa_many[1] if pa_many else None
    add(
        f"pa learn_many (batches of {BATCH}) / river PARegressor, d=100 (alternating rounds)",
        r,
        ">= 10",
        None if r is None else r >= 10,
    )
    r = ratio_vs("dvaw", 100, "river BayesianLinearRegression")
    add("dvaw / river BLR(smoothing), d=100", r, ">= 10", None if r is None else r >= 10)
    for d in DIMS:
        ens, single = by.get(("dvaw-ensemble", d)), by.get(("dvaw", d))
        cost = None
        if ens and single and ens.rate and single.rate:
            k = learners.REGISTRY["dvaw-ensemble"](d)._gamma.size
            cost = (1.0 / ens.rate) / (k / single.rate)
            name = f"dvaw-ensemble cost / (K={k} x dvaw), d={d}"
        else:
            name = f"dvaw-ensemble cost / (K x dvaw), d={d}"
        add(name, cost, "<= 1.5", None if cost is None else cost <= 1.5)
    r = ratio_vs("apas", 500, "CVXPY")
    add("apas / CVXPY prox, d=500", r, ">= 10", None if r is None else r >= 10)
    return markdown_table(["target", "goal", "measured", "verdict"], rows), lines


def many_table(results: list[ManyResult]) -> str:
    rows = [
        [
            m.kind,
            m.d,
            m.batch,
            fmt_rate(m.loop_rate),
            fmt_rate(m.many_rate),
            fmt_ratio(m.many_rate, m.loop_rate),
            "yes" if m.identical else "NO",
        ]
        for m in results
    ]
    header = ["kind", "d", "batch", "loop ev/s", "learn_many ev/s", "speedup", "identical"]
    return markdown_table(header, rows)


def plot(cells: list[Cell], path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._report import save_figure

    kinds = sorted({c.kind for c in cells})
    fig, axes = plt.subplots(1, len(DIMS), figsize=(15, 6), sharey=True)
    by = {(c.kind, c.d): c for c in cells}
    for ax, d in zip(axes, DIMS, strict=True):
        ys = np.arange(len(kinds))
        ours = [by[(k, d)].rate or 0.0 if (k, d) in by else 0.0 for k in kinds]
        ax.barh(ys, ours, color="tab:blue", label="ours (learn)")
        marks = ("o", "s", "^", "D")
        for k_i, k in enumerate(kinds):
            c = by.get((k, d))
            for j, p in enumerate(c.peers if c else []):
                ax.plot(p.rate, k_i, marks[j % 4], color=f"C{j + 1}", ms=6)
        ax.set_xscale("log")
        ax.set_title(f"d = {d}")
        ax.set_xlabel("events/s (CPU time)")
        ax.set_yticks(ys, kinds)
        ax.grid(axis="x", alpha=0.3)
    axes[0].plot([], [], "o", color="C1", label="closest peer (1st)")
    axes[0].plot([], [], "s", color="C2", label="2nd peer")
    axes[0].plot([], [], "^", color="C3", label="3rd peer")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("learn() throughput per kind vs peers (same run); see learners.md for names")
    save_figure(fig, path, dpi=110)
    print(f"wrote {path.relative_to(_bench.ROOT)}")


def kernels_note() -> str:
    """Which code the learners run; the compiled kernels are loaded (from numba's cache, or
    compiled) before any timing, as a worker does once per process."""
    if _accel.get() is None:
        return "learners on the numpy path (no numba, or ONLINEPREDICT_KERNELS=0)"
    t0 = time.perf_counter()
    _accel.warm()
    return f"compiled kernels (numba), loaded in {time.perf_counter() - t0:.1f} s before timing"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=0.3, help="CPU seconds per timed cell")
    ap.add_argument("--quick", action="store_true", help="d=10 and 100 only, short budget")
    args = ap.parse_args()
    global DIMS
    if args.quick:
        DIMS = (10, 100)
        args.budget = min(args.budget, 0.1)
    started = time.perf_counter()
    info = _bench.machine() + ", " + kernels_note()
    print(info, flush=True)
    cells: list[Cell] = []
    for kind in sorted(learners.REGISTRY):
        prev = None
        for d in DIMS:
            cell = run_cell(kind, d, args.budget, prev)
            cells.append(cell)
            print(
                f"{kind:16s} d={d:4d} {fmt_rate(cell.rate):>10s} ev/s  "
                + "  ".join(f"{p.name}: {fmt_rate(p.rate)}" for p in cell.peers)
                + (f"  [{cell.note}]" if cell.note else ""),
                flush=True,
            )
            prev = cell if cell.rate else prev
    sgd = sgd_rates(args.budget)
    many = []
    for c in cells:
        if c.d in (10, 100) and c.rate:
            many.append(run_learn_many(c.kind, c.d, 1.0 / c.rate, args.budget))
    pa_many = pa_batched_vs_river(100, 2 * args.budget) if 100 in DIMS else None
    t_table, t_lines = targets(cells, pa_many)
    elapsed = time.perf_counter() - started
    text = "\n\n".join(
        [
            "# Learner throughput vs peers (benchmarks/learners.py)",
            f"Machine: {info}. Whole run {elapsed:.0f} s. Events/s are CPU-time rates"
            f" (time.process_time), {args.budget} s budget per cell after 3 warm-up events.",
            "## Targets (issue 9)",
            t_table,
            "## Throughput of learn() per kind, with scikit-learn SGD partial_fit as baseline",
            "SGD baseline: SGDRegressor(squared_error) for regressors, SGDClassifier(hinge) for"
            " classifiers, one row per partial_fit call (unlabelled rows of quantifiers skipped).",
            throughput_table(cells, sgd),
            "## Closest peers, same run",
            "river takes dict rows, built once outside the timing. river's PARegressor feeds"
            " its epsilon-insensitive loss the target mapped to 2y - 1 (a classification"
            " mapping) while stepping along sign(y - y_hat): its updates are not the paper's"
            " PA-I, so its predictions disagree with ours; scikit-learn's"
            " SGDRegressor(learning_rate='pa1') is the paper's PA-I and agrees. river's"
            " BayesianLinearRegression with smoothing s and alpha = lam (1 - s) is the"
            " forgetting-factor RLS, so it is compared with our RLS a-priori prediction"
            " (diagnostic rls_prediction of dvaw; mu = y_hat / (1 - leverage) for vaw).",
            peers_table(cells),
            f"## learn_many vs a loop of learn (batch up to {BATCH})",
            many_table(many),
            "![throughput](learners.png)",
        ]
    )
    print()
    print(t_table)
    print()
    print(throughput_table(cells, sgd))
    print()
    print(peers_table(cells))
    print()
    print(many_table(many))
    write(RESULTS / "learners.md", text + "\n")
    plot(cells, RESULTS / "learners.png")
    print(f"total {elapsed:.0f} s; " + "; ".join(t_lines))


if __name__ == "__main__":
    main()
