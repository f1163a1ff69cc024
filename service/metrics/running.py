"""Per-model running statistics behind the learning metrics (cumulative loss, regret,
tracking error, mistakes, prevalence, portfolio figures).

They are updated by the worker after each applied event and checkpointed with the learner
state (as one codec blob), so the figures continue exactly after a restart or rebalance and
are the same whichever worker owns the model. The API's ``/metrics`` reads them back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from learners.base import StateSize, StepReports
from service.metrics.guard import ScaleGuard
from service.metrics.regret import RegretTracker

WINDOW = 100  # events in the sliding tracking-error window
# Regret needs the d x d sums of x x^T: O(d^2) bytes in every checkpoint (and each kept one)
# and an O(d^3) solve per read, whatever the learner costs (pa is O(d), up to 100,000 dims).
# Above this dimension it is not tracked and ``cumulative_regret`` is not reported
# (docs/design.md, "Metrics"); 256 keeps the sums at 512 KiB.
REGRET_MAX_DIM = 256
KLD_EPS_FLOOR = 1e-3  # smoothing of the prevalence KLD (docs/algorithms/nemsis.md)


class RunningStats:
    """Running figures of one model; ``figures()`` gives the exported values."""

    def __init__(self, task: str, dim: int, window: int = WINDOW) -> None:
        self.task = task
        self.dim = dim
        self.window = window
        self.n = 0  # labelled events scored
        self.loss_sum = 0.0
        self.sq_err = 0.0
        self.hinge_sum = 0.0
        self.mistakes = 0
        self.positives = 0  # labelled events with y > 0 (quantifiers' true prevalence)
        self.unlabelled = 0
        self.log_excess = 0.0  # sum log(1+yhat) - log(1+y), index trackers (ECR)
        self.turnover = 0.0
        self.ring = np.zeros(window)  # last squared errors, for the windowed RMSE
        tracked = task == "regression" and dim <= REGRET_MAX_DIM
        self.regret = RegretTracker(dim) if tracked else None
        self.last: dict[str, float] = {}  # the last step's learner diagnostics
        # the worker's scale guard (service/metrics/guard.py): checkpointed with these
        # figures, put back with them by the fault boundary
        self.scale: ScaleGuard | None = None

    @staticmethod
    def state_size(task: str, dim: int, window: int = WINDOW) -> StateSize:
        """The bytes of the arrays ``state()`` checkpoints, before any exists: the ring of
        ``window`` squared errors and, for regression up to ``REGRET_MAX_DIM``, the regret
        sums A (d x d) and b (d), and the scale guard's two sums per column (16 x d). The last
        step's diagnostics (a few numbers) are not counted."""
        if task != "regression" or dim > REGRET_MAX_DIM:
            return StateSize.of((16, "d", dim), (8 * window, "", 1))
        return StateSize.of((8, "d^2", dim * dim), (24, "d", dim), (8 * window, "", 1))

    # ---- updating --------------------------------------------------------------------------
    def update(
        self, x: np.ndarray, y: Any, prediction: Any, loss: float, diagnostics: dict[str, float]
    ) -> None:
        self.last = {k: float(v) for k, v in diagnostics.items() if _finite(v)}
        if y is None:
            self.unlabelled += 1
            return
        self._score(y, prediction, loss, diagnostics)
        if self.regret is not None:
            self.regret.update(x, float(y), float(prediction))

    def update_many(self, X: np.ndarray, ys: list[Any], reports: Sequence[Any]) -> None:
        """``update`` for each row of ``X`` with its label and ``StepReport``, in order:
        the same figures bit for bit, with the regression sufficient statistics summed in
        one pass (``RegretTracker.update_many``) and only the last step's diagnostics
        kept (``update`` overwrites them every step)."""
        if not reports:
            return
        if None in ys:  # labels are numbers, booleans or None: == finds only None
            for x, y, r in zip(X, ys, reports, strict=True):
                self.update(x, y, r.prediction, r.loss, r.diagnostics)
            return
        self._score_many(ys, reports)
        if self.regret is not None:
            preds = (
                reports.predictions
                if isinstance(reports, StepReports)
                else [float(r.prediction) for r in reports]
            )
            self.regret.update_many(X, [float(y) for y in ys], preds)
        last = reports[-1].diagnostics
        self.last = {k: float(v) for k, v in last.items() if _finite(v)}

    def _score_many(self, ys: list[Any], reports: Sequence[Any]) -> None:
        """``_score`` for each labelled event of a block, in order, bit for bit: the float
        sums are running sums (``np.add.accumulate`` adds one term after the other, as the
        loop does; ``sum`` and ``np.add.reduce`` would pair them up)."""
        # a compiled batch's columns: no report is built
        columns = reports if isinstance(reports, StepReports) else None
        if (
            "turnover" in columns.diagnostic_names
            if columns is not None
            else any("turnover" in r.diagnostics for r in reports)
        ):  # index trackers: rare
            for y, r in zip(ys, reports, strict=True):
                self._score(y, r.prediction, r.loss, r.diagnostics)
            return
        k = len(reports)
        first = self.n
        self.n += k
        losses = (
            np.array(columns.losses, dtype=np.float64)
            if columns is not None
            else np.fromiter((float(r.loss) for r in reports), np.float64, k)
        )
        self.loss_sum = _running_sum(self.loss_sum, losses)
        if self.task == "regression":
            preds = (
                np.array(columns.predictions, dtype=np.float64)
                if columns is not None
                else np.fromiter((float(r.prediction) for r in reports), np.float64, k)
            )
            err = preds - np.fromiter(map(float, ys), np.float64, k)
            sq = err * err
            self.sq_err = _running_sum(self.sq_err, sq)
            w = min(k, self.window)  # only the last ``window`` stay in the ring
            self.ring[np.arange(first + k - w, first + k) % self.window] = sq[k - w :]
            return
        self.mistakes += int(np.count_nonzero(losses > 0))
        self.positives += sum(map(_is_positive, ys))
        hinges = [
            float(h)
            for r in reports
            if (h := r.diagnostics.get("hinge", r.diagnostics.get("hinge_loss"))) is not None
            and _finite(h)
        ]
        if hinges:
            self.hinge_sum = _running_sum(self.hinge_sum, np.array(hinges, dtype=np.float64))

    def _score(self, y: Any, prediction: Any, loss: float, diagnostics: dict[str, float]) -> None:
        """The scalar figures of one labelled event (the regret sums are the caller's)."""
        self.n += 1
        self.loss_sum += float(loss)
        if self.task == "regression":
            err = float(prediction) - float(y)
            self.sq_err += err * err
            self.ring[(self.n - 1) % self.window] = err * err
            if "turnover" in diagnostics:
                self.turnover += float(diagnostics["turnover"])
                if prediction > -1.0 and y > -1.0:
                    self.log_excess += math.log1p(prediction) - math.log1p(y)
        else:
            self.mistakes += int(loss > 0)
            self.positives += int(_is_positive(y))
            hinge = diagnostics.get("hinge", diagnostics.get("hinge_loss"))
            if hinge is not None and _finite(hinge):
                self.hinge_sum += float(hinge)

    # ---- reading ---------------------------------------------------------------------------
    def figures(self) -> dict[str, float]:
        """Exported values, by metric suffix (see ``service.metrics.exposition``)."""
        out: dict[str, float] = {"cumulative_loss": self.loss_sum, "labelled_events": self.n}
        if self.task == "regression":
            if self.regret is not None:
                out["cumulative_regret"] = self.regret.regret()
            if self.n:
                k = min(self.n, self.window)
                out["rmse"] = math.sqrt(self.sq_err / self.n)
                out["rmse_window"] = math.sqrt(float(self.ring[:k].sum()) / k)
                out["tracking_error"] = math.sqrt(self.sq_err) / self.n  # APAS eq. (13)
            if "turnover" in self.last:
                out["excess_cumulative_return"] = self.log_excess
                out["turnover_total"] = self.turnover
        else:
            out["mistakes"] = self.mistakes
            out["cumulative_hinge_loss"] = self.hinge_sum
            if self.n:
                out["error_rate"] = self.mistakes / self.n
                out["true_prevalence"] = self.positives / self.n
                est = prevalence_estimate(self.last)
                if est is not None:
                    out["quantification_kld"] = smoothed_kld(
                        out["true_prevalence"], est, max(self.n, 1)
                    )
        return out

    # ---- checkpoint ------------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray | float | int | str]:
        s: dict[str, np.ndarray | float | int | str] = {
            "task": self.task,
            "dim": self.dim,
            "window": self.window,
            "n": self.n,
            "loss_sum": self.loss_sum,
            "sq_err": self.sq_err,
            "hinge_sum": self.hinge_sum,
            "mistakes": self.mistakes,
            "positives": self.positives,
            "unlabelled": self.unlabelled,
            "log_excess": self.log_excess,
            "turnover": self.turnover,
            "ring": self.ring.copy(),
            "last_keys": "\x1f".join(self.last),
            "last_values": np.array(list(self.last.values()), dtype=np.float64),
        }
        if self.regret is not None:
            s.update(
                A=self.regret.A_.copy(),
                b=self.regret.b_.copy(),
                c=self.regret.c_,
                rloss=self.regret.loss_,
            )
        if self.scale is not None:
            s.update(self.scale.state())
        return s

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> RunningStats:
        rs = cls(str(s["task"]), int(s["dim"]), int(s["window"]))
        for name in ("n", "mistakes", "positives", "unlabelled"):
            setattr(rs, name, int(s[name]))
        for name in ("loss_sum", "sq_err", "hinge_sum", "log_excess", "turnover"):
            setattr(rs, name, float(s[name]))
        rs.ring = np.array(s["ring"], dtype=np.float64)
        keys = str(s["last_keys"]).split("\x1f") if s["last_keys"] else []
        rs.last = dict(zip(keys, map(float, s["last_values"]), strict=True))
        if "A" not in s:
            rs.regret = None
        else:  # tracked when it was made (a model from before the bound keeps its sums)
            rs.regret = rs.regret or RegretTracker(rs.dim)
            rs.regret.A_ = np.array(s["A"], dtype=np.float64)
            rs.regret.b_ = np.array(s["b"], dtype=np.float64)
            rs.regret.c_ = float(s["c"])
            rs.regret.loss_ = float(s["rloss"])
        rs.scale = ScaleGuard.from_state(rs.dim, s)
        return rs


# diagnostic names under which quantifiers report their prevalence estimate (nemsis:
# ``prevalence_cc``, classify-and-count over its unlabelled window)
PREVALENCE_KEYS = ("prevalence", "prevalence_estimate", "prevalence_cc")


def prevalence_estimate(diagnostics: dict[str, float]) -> float | None:
    for key in PREVALENCE_KEYS:
        if key in diagnostics:
            return diagnostics[key]
    return None


def smoothed_kld(p: float, p_hat: float, n: int) -> float:
    """Binary KLD with additive smoothing eps = 1/(2n) (docs/algorithms/nemsis.md)."""
    eps = max(1.0 / (2.0 * n), 0.0) if n else KLD_EPS_FLOOR

    def sm(v: float) -> float:
        return (v + eps) / (1.0 + 2.0 * eps)

    ps, qs = sm(p), sm(min(max(p_hat, 0.0), 1.0))
    return ps * math.log(ps / qs) + (1 - ps) * math.log((1 - ps) / (1 - qs))


def _running_sum(start: float, terms: np.ndarray) -> float:
    """``start`` plus each term in turn, as a loop of ``+=`` gives it."""
    return float(np.add.accumulate(np.concatenate(([start], terms)))[-1])


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _is_positive(y: Any) -> bool:
    if isinstance(y, bool):
        return y
    try:
        return float(y) > 0
    except (TypeError, ValueError):
        return False
