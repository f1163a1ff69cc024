"""The scale guard (docs/reliability.md, "The guard"): refuse a row whose scale is far
outside what the model has learned, before it is learned.

One row of 1e20 (or 1e100, 1e149: inside the value bound) learned by most kinds leaves a
finite state that predicts 1e18 for ever, or overflows on later moderate rows (each then
refused): measured per kind in docs/reliability.md. The guard keeps, per column of ``x``
and for a regression label ``y``, the running mean of log10|v| over the nonzero values
learned (a geometric mean: one large value moves it by log10(v)/n, so an attacker cannot
ratchet it up quickly, unlike a running maximum). A value is refused when

* its column has ``WARMUP`` values or more and |v| > ``FACTOR`` x max(1, that mean);
* its column has fewer (a feature so far always 0, e.g. after intercept-only rows, or the
  first rows) and the model has learned some nonzero value: |v| > ``FALLBACK`` x max(1, the
  mean over all columns), a looser bound (a new column may be in other units);
* nothing nonzero was learned yet, or always: |v| > ``ABSOLUTE`` (1e75: products of two
  such values stay 1e150 away from overflow).

The label ``y`` of a regression model is guarded the same way against its own mean (the
fallback against its own mean too). Zeros carry no scale and are never refused; anything up
to ``FACTOR`` is always accepted (the floor of 1 on the reference: tiny units never make
moderate values look huge). The state lives in
:class:`~service.metrics.running.RunningStats` (checkpointed with it, put back by the fault
boundary's undo with it).

Rows are decided in order; ``admit_many`` decides a block with the running sums
accumulated row by row (``np.add.accumulate``), so a block gives the same decisions and the
same sums, bit for bit, as its rows one by one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

WARMUP = 5
FACTOR = 1e6
FALLBACK = 1e12
ABSOLUTE = 1e75
_LF, _LB, _LA = math.log10(FACTOR), math.log10(FALLBACK), math.log10(ABSOLUTE)
# rows at a time in admit_many: bounds its k x d work arrays
_CELLS = 1 << 20

# kinds whose update divides by ||x||^2 (pa, pa-classifier): a huge x moves them by a
# bounded step and they recover at once (measured: docs/reliability.md, "The guard"), so
# x is not guarded for them; their regression label is.
X_UNGUARDED = frozenset({"pa", "pa-classifier"})


def _label_limit(ysum: float, ycount: int) -> float:
    """log10 of the largest |y| admitted, given the label's sums before the row."""
    if ycount >= WARMUP:
        return min(_LA, _LF + max(0.0, ysum / ycount))
    if ycount > 0:
        return min(_LA, _LB + max(0.0, ysum / ycount))
    return _LA


class Refused(ValueError):
    """A row the guard refuses; ``row`` is its index in a block (0 for one row)."""

    def __init__(self, reason: str, row: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.row = row


class ScaleGuard:
    """Running log-scales of one model's columns and label."""

    def __init__(self, dim: int, *, x: bool, y: bool) -> None:
        self.dim = dim
        self.x = x
        self.y = y
        self.lsum = np.zeros(dim if x else 0)
        self.lcount = np.zeros(dim if x else 0)  # floats: exact far beyond any event count
        self.ysum = 0.0
        self.ycount = 0

    @classmethod
    def for_kind(cls, kind: str, task: str, dim: int) -> ScaleGuard:
        return cls(dim, x=kind not in X_UNGUARDED, y=task == "regression")

    # ---- one row ---------------------------------------------------------------------------
    def admit(self, x: np.ndarray, y: Any) -> None:
        """Learn the row's scales, or raise :class:`Refused` (nothing changed). A row the
        learner will refuse anyway (wrong dimension, non-finite) passes untouched."""
        ly = self._label_log(y)
        if self.x and x.shape == (self.dim,):
            a = np.abs(x)
            nz = a > 0.0
            lg = np.zeros(self.dim)  # log10|v|, 0 for a zero (no scale: never refused)
            np.log10(a, out=lg, where=nz)
            if not np.isfinite(lg).all():
                return  # NaN / inf: the learner's refusal, with its own message
            if self.lcount.min() >= WARMUP:  # the usual: every column has its scale
                limit = np.minimum(_LA, _LF + np.maximum(0.0, self.lsum / self.lcount))
            else:
                limit = self._limits(self.lsum, self.lcount)
            over = lg > limit  # a zero's 0 is below every limit (>= 6)
            if over.any():
                j = int(np.argmax(over))
                why = self._why(f"x[{j}]", float(x[j]), self.lsum[j], self.lcount[j])
                raise Refused(why)
            self._check_y(ly)
            self.lsum = self.lsum + lg
            self.lcount = self.lcount + nz
            self._add_y(ly)
            return
        self._check_y(ly)
        self._add_y(ly)

    def _limits(self, lsum: np.ndarray, lcount: np.ndarray) -> np.ndarray:
        """log10 of the largest |v| admitted per column, given the sums before the row."""
        own = np.full(self.dim, _LA)
        seen = lcount >= WARMUP
        if seen.any():
            own[seen] = np.minimum(_LA, _LF + np.maximum(0.0, lsum[seen] / lcount[seen]))
        n = lcount.sum()
        if n > 0 and not seen.all():
            own[~seen] = min(_LA, _LB + max(0.0, float(lsum.sum() / n)))
        return own

    def _label_log(self, y: Any) -> float | None:
        if not self.y or y is None or type(y) is bool or not isinstance(y, int | float):
            return None
        v = abs(float(y))
        return math.log10(v) if 0.0 < v < math.inf else None

    def _check_y(self, ly: float | None) -> None:
        if ly is not None and ly > _label_limit(self.ysum, self.ycount):
            raise Refused(self._why("y", 10.0**ly, self.ysum, self.ycount))

    def _add_y(self, ly: float | None) -> None:
        if ly is not None:
            self.ysum += ly
            self.ycount += 1

    @staticmethod
    def _why(what: str, value: float, lsum: float, n: float) -> str:
        if value > ABSOLUTE:
            return (
                f"{what} = {value:.3g} is beyond {ABSOLUTE:.0e}, the scale no model learns;"
                ' it is refused (docs/reliability.md, "The guard")'
            )
        if n >= WARMUP:
            ref = 10.0 ** max(0.0, float(lsum) / n)
            return (
                f"{what} = {value:.3g} is more than {FACTOR:.0e} times the scale this model has"
                f" learned for it (about {ref:.3g}, over {int(n)} values); learning it would"
                ' ruin the model, so it is refused (docs/reliability.md, "The guard")'
            )
        return (
            f"{what} = {value:.3g} is more than {FALLBACK:.0e} times the scale of what this"
            " model has learned (too few such values for a scale of their own); learning it"
            ' would ruin the model, so it is refused (docs/reliability.md, "The guard")'
        )

    # ---- a block ---------------------------------------------------------------------------
    def admit_many(self, X: np.ndarray, ys: list[Any]) -> None:
        """``admit`` for each row in order, all or nothing: raises :class:`Refused` when a
        row is refused (nothing changed: the caller decides the rows one by one)."""
        k = len(ys)
        if not k:
            return
        lys = [self._label_log(y) for y in ys] if self.y else None
        if not self.x or X.ndim != 2 or X.shape[1] != self.dim:
            if lys is not None:
                self._admit_labels(lys)
            return
        step = max(1, _CELLS // max(1, self.dim))
        lsum, lcount = self.lsum, self.lcount
        for at in range(0, k, step):
            block = X[at : at + step]
            a = np.abs(block)
            nz = a > 0.0
            lg = np.zeros(block.shape)
            np.log10(a, out=lg, where=nz)
            if not np.isfinite(lg).all():  # a row the learner refuses: the per-row path
                raise Refused("a non-finite value", at + int(np.argmax(~np.isfinite(lg).all(1))))
            warm = lcount.min() >= WARMUP  # every column has its scale (counts only grow)
            if not warm or lg.max() > _LF:  # else every row passes: each limit is >= 1e6
                # the sums before each row, accumulated one row after the other
                sums = np.add.accumulate(np.vstack([lsum, lg]), axis=0)
                counts = np.add.accumulate(np.vstack([lcount, nz.astype(np.float64)]), axis=0)
                if warm:  # every row at once; a zero's log (0) is below every limit
                    limit = np.minimum(_LA, _LF + np.maximum(0.0, sums[:-1] / counts[:-1]))
                    if (lg > limit).any():
                        raise Refused("scale", at)
                else:  # a model's first rows: row by row, as ``admit`` decides them
                    for i in range(len(block)):
                        if (nz[i] & (lg[i] > self._limits(sums[i], counts[i]))).any():
                            raise Refused("scale", at + i)
                lsum, lcount = sums[-1].copy(), counts[-1].copy()
            else:  # the same sums, one row after the other, in place: no copies
                lg[0] += lsum
                lsum = np.add.accumulate(lg, axis=0, out=lg)[-1].copy()
                c = nz.astype(np.float64)
                c[0] += lcount
                lcount = np.add.accumulate(c, axis=0, out=c)[-1].copy()
        if lys is not None:
            self._admit_labels(lys)  # raises before changing anything
        self.lsum, self.lcount = lsum, lcount

    def _admit_labels(self, lys: list[float | None]) -> None:
        ysum, ycount = self.ysum, self.ycount
        for i, ly in enumerate(lys):
            if ly is not None:
                if ly > _label_limit(ysum, ycount):
                    raise Refused("scale", i)
                ysum += ly
                ycount += 1
        self.ysum, self.ycount = ysum, ycount

    # ---- checkpoint ------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "guard_x": int(self.x),
            "guard_y": int(self.y),
            "guard_lsum": self.lsum.copy(),
            "guard_lcount": self.lcount.copy(),
            "guard_ysum": self.ysum,
            "guard_ycount": self.ycount,
        }

    @classmethod
    def from_state(cls, dim: int, s: dict[str, Any]) -> ScaleGuard | None:
        if "guard_lsum" not in s:
            return None  # a checkpoint from before the guard: a fresh one (a new warm-up)
        g = cls(dim, x=bool(int(s["guard_x"])), y=bool(int(s["guard_y"])))
        g.lsum = np.array(s["guard_lsum"], dtype=np.float64)
        g.lcount = np.array(s["guard_lcount"], dtype=np.float64)
        g.ysum = float(s["guard_ysum"])
        g.ycount = int(s["guard_ycount"])
        return g
