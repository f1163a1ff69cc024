"""A request's cost budget (``ONLINEPREDICT_MAX_REQUEST_COST``): refused with a 413 before
any work, so one request cannot hold the API's CPU for seconds.

A request's cost is ``rows x row_cost(kind, dim)``, in units of about 1 ns of API CPU on
the machine it was measured on (``benchmarks/request_cost.py``, 2 shared cores):

    row_cost = 2,000 + 50 * dim + quadratic * dim**2 + constant

The first two terms are what every kind costs per row (parsing, checks, a dot product);
``quadratic`` and ``constant`` are the kind's own (``KIND_COST``): kinds with a d x d
matrix in their prediction (a covariance, a second-order step), and the transductive
logistic model, which solves for every row. Measured (us per row, predict_many):
``dvaw-sa`` 73 at d = 20, 1,714 at d = 100, 12,525 at d = 300 (the issue's 8 MB predict:
10,000 rows, ~17 s); ``vaw``/``dvaw``/``rls`` 4-5, 7, 16-17; ``dvaw-ensemble`` 16, 52,
273; linear kinds 0.4-4.4 at d = 100; ``transductive-logistic`` 5,500-6,900 at any d.

Events cost ``rows x (2,000 + 50 * dim)`` whatever the kind: the API only parses, checks
and produces them (the workers' learning is bounded by the ``ingest`` rate limit). A
block (``POST .../blocks``) costs four times that: the API registers it on a copy of the
learner first (measured 5-27 us per row at d = 20-100).
"""

from __future__ import annotations

from typing import Literal

from service.api.errors import RequestTooCostly
from service.api.schemas import ModelSpec

ROW_BASE = 2_000
PER_DIM = 50

# kind -> (quadratic, constant); other kinds cost the base and the linear term only
# (fitted to the measurements above, rounded up: an estimate that errs on the high side;
# benchmarks/results/request_cost.md holds a run of benchmarks/request_cost.py beside it)
KIND_COST: dict[str, tuple[float, float]] = {
    "vaw": (0.5, 3_000.0),
    "dvaw": (0.5, 3_000.0),
    "rls": (0.5, 3_000.0),
    "dvaw-ensemble": (4.0, 15_000.0),
    "dvaw-sa": (170.0, 0.0),
    "transductive-logistic": (0.0, 6_000_000.0),
}

Work = Literal["predict", "quantify", "events", "blocks"]


def row_cost(kind: str, dim: int, work: Work = "predict") -> float:
    """The estimated cost of one row of ``work`` on a ``kind`` model of dimension ``dim``."""
    linear = ROW_BASE + PER_DIM * dim
    if work == "events":
        return float(linear)
    if work == "blocks":  # a transductive learner's dry-run register: 5-27 us per row
        return 4.0 * linear
    quadratic, constant = KIND_COST.get(kind, (0.0, 0.0))
    return linear + quadratic * dim * dim + constant


def request_cost(spec: ModelSpec, rows: int, work: Work = "predict") -> float:
    return rows * row_cost(spec.kind, spec.dim, work)


def check_cost(spec: ModelSpec, rows: int, limit: int, work: Work = "predict") -> None:
    """``RequestTooCostly`` (413) naming the cost, the limit and the rows that would fit,
    when ``rows`` of ``work`` on this model cost more than ``limit`` (0: no limit)."""
    if limit <= 0:
        return
    cost = request_cost(spec, rows, work)
    if cost <= limit:
        return
    fits = max(int(limit // row_cost(spec.kind, spec.dim, work)), 0)
    raise RequestTooCostly(
        f"{work} of {rows} rows on model {spec.id!r} ({spec.kind}, dim {spec.dim}) is"
        f" estimated at {cost:.3g} cost units, over this server's limit of {limit:.3g} per"
        f" request (ONLINEPREDICT_MAX_REQUEST_COST): send at most {fits} rows per request"
    )
