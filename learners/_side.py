"""Side-information functions h_t of APAS (``docs/algorithms/apas.md``), selected by name.

A :class:`SideInfo` is built per round from the instance ``x_t`` and the held weight ``w_t``;
it gives the value h_t(w) (for f_t and tests), a (sub)gradient (for SCA) and the prox of
``lam * (h_t + i_W)`` (eq. (5)). The log-return is smooth and uses Algorithm 2; the other
functions are non-smooth and use the exact proxes of §7 item 12.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learners._prox import (
    ProxResult,
    group_norms,
    projection,
    prox_group_lasso,
    prox_turnover,
    prox_weighted_l1,
    sca_prox,
)

SIDES = ("log_return", "weighted_l1", "turnover", "group_lasso", "none")
#: floor of 1 + x.w inside the log: unreachable on the simplex with returns > -1 (§2.6).
LOG_FLOOR = 1e-8


@dataclass(frozen=True)
class ScaSettings:
    gamma1: float = 1.0
    rho: float = 0.01
    tol: float = 1e-10
    max_iter: int = 100


@dataclass(frozen=True)
class SideInfo:
    """h_t for one round.

    ``rho`` is the per-asset (weighted_l1), per-group (group_lasso) or scalar (turnover)
    weight; ``groups`` labels each asset 0..m-1; ``anchor`` is w_t for the switching cost.
    """

    name: str
    x: np.ndarray
    anchor: np.ndarray
    rho: np.ndarray
    groups: np.ndarray

    def value(self, w: np.ndarray) -> float:
        if self.name == "log_return":
            # h_t(w) = -log(1 + x_t.w), the negative log-return of the current period (§1.5)
            return -float(np.log(max(1.0 + float(self.x @ w), LOG_FLOOR)))
        if self.name == "weighted_l1":
            return float(self.rho @ np.abs(w))
        if self.name == "turnover":
            return float(self.rho[0] * np.abs(w - self.anchor).sum())
        if self.name == "group_lasso":
            return float(self.rho @ group_norms(w, self.groups, self.rho.size))
        return 0.0

    def grad(self, w: np.ndarray) -> np.ndarray:
        """A (sub)gradient of h_t at w (§3.2 table)."""
        if self.name == "log_return":
            return -self.x / max(1.0 + float(self.x @ w), LOG_FLOOR)
        if self.name == "weighted_l1":
            return self.rho * np.sign(w)
        if self.name == "turnover":
            return self.rho[0] * np.sign(w - self.anchor)
        if self.name == "group_lasso":
            norms = group_norms(w, self.groups, self.rho.size)
            safe = np.where(norms > 0.0, norms, 1.0)
            return np.where(norms > 0.0, self.rho / safe, 0.0)[self.groups] * w
        return np.zeros_like(w)

    def log_guarded(self, w: np.ndarray) -> bool:
        """Whether 1 + x.w falls below the log floor at w (only possible off the simplex)."""
        return self.name == "log_return" and 1.0 + float(self.x @ w) < LOG_FLOOR

    def prox(
        self,
        w_hat: np.ndarray,
        lam: float,
        feasible: str,
        radius: float,
        sca: ScaSettings,
    ) -> ProxResult:
        """prox_{lam (h_t + i_W)}(w_hat), eq. (5)."""
        if self.name == "weighted_l1":
            return prox_weighted_l1(w_hat, lam, self.rho, feasible, radius)
        if self.name == "turnover":
            return prox_turnover(w_hat, lam, float(self.rho[0]), self.anchor, feasible, radius)
        if self.name == "group_lasso":
            return prox_group_lasso(w_hat, lam, self.rho, self.groups, feasible, radius)
        proj = projection(feasible, radius)
        if self.name == "none":
            return ProxResult(proj(w_hat), 1, True)  # h const: PA with lazy projection (4)
        # SCA start point: Pi_W(w_hat), the lam -> 0 solution (§2.1 DEFAULT).
        return sca_prox(
            w_hat,
            lam,
            self.grad,
            proj,
            proj(w_hat),
            gamma1=sca.gamma1,
            rho=sca.rho,
            tol=sca.tol,
            max_iter=sca.max_iter,
        )
