"""Request and response models: the HTTP wire contract (docs/design.md, "HTTP API").

Floats are finite everywhere (``allow_inf_nan=False``), so NaN and inf are a readable 422.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StringConstraints,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)

import learners
from learners.quantification import DEFAULT_METHOD, METHODS
from service.limits import MAX_ABS_VALUE
from service.metrics.exposition import FIGURE_HELP

#: Model ids become part of Redis keys and Kafka keys: no braces, colons or spaces.
ModelId = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"),
    Field(description="1-128 characters: letters, digits, '.', '_', '-'.", examples=["sp500"]),
]
EventId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256),
    Field(description="Idempotency key: an event id is applied at most once."),
]


def _bounded(v: Any) -> Any:
    if v is not None and not -MAX_ABS_VALUE <= v <= MAX_ABS_VALUE:
        raise ValueError(f'values must be within ±{MAX_ABS_VALUE:g} (docs/events.md, "Values")')
    return v


#: A learned value: within MAX_ABS_VALUE, so the learners' arithmetic cannot overflow.
Bounded = AfterValidator(_bounded)
Label = Annotated[
    float | int | bool,
    Bounded,
    Field(description="Regression target, or class label (-1/+1, 0/1, true/false)."),
]
Vector = list[float]
LearnedVector = list[Annotated[float, Bounded]]


X_DOC = (
    "The feature vector: a list of dim numbers, or, for a model created with `features`, an"
    " object {name: number} (names left out are 0; an unknown name is a 422)."
)
#: The tags of a vector's two forms (pydantic puts them in an error's location).
VECTOR_FORMS = ("list", "object")


def _x_form(v: Any) -> str:
    return "object" if isinstance(v, dict) else "list"


def _list_or_object(as_list: Any, as_object: Any) -> Any:
    """x as a list of numbers, or as an object ``{name: value}`` for a model with
    ``features`` (docs/events.md §1); the form is told by the input, so an error names the
    one the client sent."""
    return Annotated[
        Union[Annotated[as_list, Tag("list")], Annotated[as_object, Tag("object")]],  # noqa: UP007
        Discriminator(_x_form),
    ]


if TYPE_CHECKING:
    AnyVector = Vector | dict[str, float]
    AnyLearnedVector = AnyVector
else:
    AnyVector = _list_or_object(Vector, dict[str, float])
    AnyLearnedVector = _list_or_object(LearnedVector, dict[str, Annotated[float, Bounded]])
FeatureName = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Strict(BaseModel):
    # pydantic merges a subclass's model_config into this one: subclasses add only examples
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ErrorResponse(BaseModel):
    detail: str = Field(examples=["x must have dimension 3, got 2 values"])
    errors: list[dict[str, Any]] | None = None


# ---- models --------------------------------------------------------------------------------
class PreprocessSpec(_Strict):
    """Preprocessing inside the model (docs/design.md, "Preprocessing"), applied in this
    order; a kind may refuse a step (422 naming the reason). Omitted when a model is
    created: the kind's default (``Learner.preprocess_default``); null: none."""

    standardize: bool = Field(
        False,
        strict=True,
        description="Online standardisation with the statistics of the learned x.",
    )
    clip: float | None = Field(None, gt=0, description="Clip each value to [-clip, clip].")
    intercept: bool = Field(
        False, strict=True, description="Append a constant 1 (the learner gets dim+1)."
    )


class ModelSpec(_Strict):
    """A model: learner ``kind``, feature dimension and the learner's hyperparameters."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"id": "demo-pa", "kind": "pa", "dim": 3, "params": {"variant": "pa2", "C": 1.0}},
                {
                    "id": "sp500",
                    "kind": "apas",
                    "dim": 3,
                    "params": {"lam": 0.1},
                    "features": ["AAPL", "MSFT", "AMZN"],
                },
            ]
        },
    )

    id: ModelId
    kind: str = Field(description="A learner kind from the registry, e.g. 'pa'.")
    dim: int = Field(ge=1, description="Number of features of x.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword hyperparameters of the learner."
    )
    features: list[FeatureName] | None = Field(
        default=None,
        description="Optional names of the dim features, in x's order: x may then be an"
        " object {name: value} (missing names are 0). An index tracker's are its assets.",
    )
    assets: list[FeatureName] | None = Field(
        default=None,
        exclude=True,  # stored and answered as `features`, the canonical form
        json_schema_extra={"deprecated": True},  # (pydantic's `deprecated` warns on reads)
        description="Deprecated: the earlier name of `features` (an index tracker's asset"
        " tickers); if both are given they must be equal.",
    )
    preprocess: PreprocessSpec | None = Field(default=None, description=PreprocessSpec.__doc__)

    # The home partition (docs/reliability.md, "Partitions"): set from a stored spec's
    # origin, never from a request; None for a spec made before incarnations.
    _home: int | None = PrivateAttr(default=None)
    # the stored spec's incarnation (docs/reliability.md, "Re-creating a model"): the API
    # puts it on every record it produces, so a worker never learns one for another
    # incarnation; None for a spec made before incarnations
    _incarnation: str | None = PrivateAttr(default=None)

    @property
    def home(self) -> int | None:
        return self._home

    @property
    def incarnation_id(self) -> str | None:  # not ``incarnation``: ModelOut's field
        return self._incarnation

    @classmethod
    def from_stored(cls, raw: dict[str, Any]) -> ModelSpec:
        """Parse a stored spec, ignoring bookkeeping fields the registry keeps next to it."""
        spec = cls.model_validate({k: raw[k] for k in ModelSpec.model_fields if k in raw})
        origin = raw.get("origin")
        if isinstance(origin, dict):
            spec._home = int(origin["partition"])
        incarnation = raw.get("incarnation")
        if isinstance(incarnation, str) and incarnation:
            spec._incarnation = incarnation
        return spec

    @model_validator(mode="after")
    def _check_features(self) -> ModelSpec:
        given = "features"
        if self.assets is not None:  # the earlier name (a stored spec may still have it)
            if self.features is not None and self.features != self.assets:
                raise ValueError("features and assets (its earlier name) differ: give one")
            self.features, self.assets, given = self.assets, None, "assets"
        if self.features is not None:
            if len(self.features) != self.dim:
                raise ValueError(f"{given} must name all {self.dim}, got {len(self.features)}")
            if len(set(self.features)) != len(self.features):
                raise ValueError(f"{given}: names must be unique")
        return self


class _KindSpec(ModelSpec):
    model_config = ConfigDict(json_schema_extra=None)  # ModelSpec's examples mix kinds


def _spec_of_kind(kind: str, learner: type[learners.Learner]) -> type[ModelSpec]:
    """``ModelSpec`` for one learner kind, its ``params`` described by the learner's own
    declaration (``Learner.params_schema``). The schema only describes: the learner, built
    from the spec, stays the check that decides and words the message."""
    name = "".join(part.capitalize() for part in kind.replace("-", "_").split("_")) + "Spec"
    doc = (learner.__doc__ or "").strip().splitlines()
    return create_model(
        name,
        __base__=_KindSpec,
        __doc__=f"A ``{kind}`` model ({learner.task}): {doc[0] if doc else learner.__name__}",
        kind=(Literal[kind], Field(description="The learner kind.")),  # type: ignore[arg-type]
        dim=(
            int,
            Field(
                ge=1,
                description="Number of features of x.",
                # the learner's own bound (it refuses more); a server may set a lower one
                json_schema_extra={"maximum": learner.max_dim},
            ),
        ),
        params=(
            Annotated[dict[str, Any], WithJsonSchema(learner.params_schema())],
            Field(default_factory=dict, description=f"The hyperparameters of ``{kind}``."),
        ),
        preprocess=_preprocess_field(learner),
    )


def _preprocess_field(learner: type[learners.Learner]) -> tuple[Any, Any]:
    """``preprocess`` of a new model of this kind: absent is the kind's declared default
    (``Learner.preprocess_default``), null is none."""
    default = learner.preprocess_default
    return (
        PreprocessSpec | None,
        Field(
            default_factory=lambda: PreprocessSpec(**default) if default else None,
            description=(
                f"Preprocessing inside the model; omitted: {json.dumps(default)} (this kind's"
                " default), null: none."
                if default
                else "Preprocessing inside the model; omitted or null: none."
            ),
            json_schema_extra={"default": default},
        ),
    )


#: The body of ``POST /v1/models``: one ``ModelSpec`` per learner kind, told apart by
#: ``kind`` (OpenAPI: ``oneOf`` with a discriminator), generated from the learners' registry.
SPEC_DISCRIMINATOR = "kind"
if TYPE_CHECKING:  # built at import time; type checkers see ModelSpec, every variant's base
    NewModelSpec = ModelSpec
else:
    NewModelSpec = Annotated[
        Union[tuple(_spec_of_kind(k, c) for k, c in sorted(learners.REGISTRY.items()))],  # noqa: UP007
        Field(discriminator=SPEC_DISCRIMINATOR),
    ]


class ModelStatus(BaseModel):
    version: int = Field(description="Checkpoint version; 0 before the first checkpoint.")
    applied: int = 0
    duplicate: int = 0
    rejected: int = 0
    discarded: int = Field(
        0,
        description="Events learned and then undone by rollbacks with `discard_after`"
        " (docs/checkpoints.md); not in `applied`.",
    )
    updated_at: float | None = Field(
        None, description="Unix time of the last checkpoint; null before the first."
    )
    halted: str | None = Field(
        None,
        description="Why the model stopped learning (its log diverged further back than"
        " its dedupe window can tell old events from new ones); null while it learns."
        " Re-create the model, or roll it back to a version whose events the log holds.",
    )
    refusing: bool = Field(
        False,
        description="The model refused most of its recent events (at least half of 20 or"
        " more): see GET /v1/models/{id}/deadletters for why.",
    )
    refused_share: float | None = Field(
        None,
        description="The share of its recent events (the last 100 or more its worker"
        " decided) the model refused; null when none was refused since its worker loaded it.",
    )


class ModelOut(ModelSpec):
    task: str = Field(description="'regression' or 'classification'.")
    partition: int | None = Field(
        default=None,
        description="The events topic partition the model lives on for life (its home:"
        " where the API produced its creation marker); external producers send its events"
        " there. None for a model created before home partitions existed.",
    )
    incarnation: str | None = Field(
        default=None,
        description="This creation of the model (a random id, new when the model is deleted"
        " and created again). Producers may put it on every event as 'incarnation': a worker"
        " never learns an event that names another one (docs/events.md). None for a model"
        " created before incarnations existed.",
    )
    status: ModelStatus | None = None


class ModelList(BaseModel):
    models: list[ModelOut]


# ---- predict -------------------------------------------------------------------------------
class PredictRequest(_Strict):
    """Either one vector ``x`` (with an optional ``hint``) or a batch ``instances``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"x": [0.1, -0.2, 0.3]}, {"instances": [[0.1, 0.2, 0.3], [1, 0, 0]]}]
        },
    )

    x: AnyVector | None = Field(None, description=X_DOC)
    hint: float | None = Field(None, description="Side information for learners that use it.")
    instances: list[AnyVector] | None = None
    hints: list[float | None] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> PredictRequest:
        if (self.x is None) == (self.instances is None):
            raise ValueError("give exactly one of 'x' (one vector) or 'instances' (a batch)")
        if self.x is None and self.hint is not None:
            raise ValueError("'hint' goes with 'x'; use 'hints' with 'instances'")
        if self.instances is not None:
            if not self.instances:
                raise ValueError("'instances' must not be empty")
            if self.hints is not None and len(self.hints) != len(self.instances):
                raise ValueError("'hints' must have one entry per instance")
        elif self.hints is not None:
            raise ValueError("'hints' goes with 'instances'; use 'hint' with 'x'")
        return self

    def rows(self) -> tuple[list[AnyVector], list[float | None]]:
        if self.x is not None:
            return [self.x], [self.hint]
        assert self.instances is not None
        return self.instances, list(self.hints or [None] * len(self.instances))


class PredictionOut(BaseModel):
    value: Any = Field(description="Point prediction: a float, or the class label.")
    prediction_id: str = Field(
        description="Send the label for this prediction with this id: '<batch id>.<row>'"
        " (docs/events.md §8)."
    )
    scores: dict[str, float | None] | None = None
    probabilities: dict[str, float] | None = Field(
        None,
        description="Classifiers: the probability of each class (keyed by the label as a"
        " string), summing to 1, as river's predict_proba_one gives (docs/probabilities.md);"
        " left out for regressors.",
    )


class PredictResponse(BaseModel):
    predictions: list[PredictionOut]
    model_version: int

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "predictions": [{"value": 0.42, "prediction_id": "3f2a...", "scores": None}],
                    "model_version": 17,
                },
                {
                    "predictions": [
                        {
                            "value": 1,
                            "prediction_id": "9c1e...",
                            "scores": {"margin": 0.8},
                            "probabilities": {"-1": 0.27, "1": 0.73},
                        }
                    ],
                    "model_version": 17,
                },
            ]
        }
    )


# ---- events and labels ---------------------------------------------------------------------
class EventIn(_Strict):
    id: EventId | None = Field(
        None,
        description="Assigned when missing: derived from the Idempotency-Key header and the"
        " event's index (32 hex digits, the same on a retry), else a uuid4 hex.",
    )
    x: AnyLearnedVector = Field(description=X_DOC)
    y: Label | None = Field(None, description="null for an unlabelled vector.")
    hint: Annotated[float | None, Bounded] = None
    ts: float | None = Field(None, description="Event time, seconds since the epoch.")


class EventsRequest(_Strict):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"events": [{"id": "e-1", "x": [0.1, 0.2, 0.3], "y": 0.5}, {"x": [1, 0, 0]}]}
            ]
        },
    )

    events: list[EventIn] = Field(min_length=1)


class Accepted(BaseModel):
    accepted: int = Field(description="Number of events produced to Kafka.")
    ids: list[str] = Field(
        description="Event ids, in order (assigned where missing; with an Idempotency-Key"
        " the same on every retry)."
    )


class LabelRequest(_Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"prediction_id": "3f2a9c...", "y": 0.37}]},
    )

    prediction_id: str = Field(min_length=1, max_length=128)
    y: Label
    ts: float | None = None


class LabelResponse(BaseModel):
    status: Literal["accepted", "duplicate"] = Field(
        description="'accepted': the label's event is on the log (a retry with the"
        " Idempotency-Key of the accepted request gets this answer again). 'duplicate': the"
        " prediction was labelled before; this label is ignored."
    )
    event_id: str = Field(description="Id of the joined event: 'label:' + prediction_id.")


# ---- task-specific -------------------------------------------------------------------------
class QuantifyRequest(_Strict):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"instances": [[0.1, 0.2], [1.0, -1.0]], "method": DEFAULT_METHOD}]
        },
    )

    instances: list[AnyVector] = Field(min_length=1)
    method: str = Field(
        DEFAULT_METHOD,
        description=f"Prevalence estimator, one of {', '.join(METHODS)}. The default"
        f" {DEFAULT_METHOD} is the one method that kept both nemsis and scan within 1.5x of"
        " QuaPy's best under prevalence shift (benchmarks/README.md); cc (classify and"
        " count) is the paper's estimator.",
    )


class QuantifyResponse(BaseModel):
    prevalence: float = Field(description="Estimated fraction of the positive class, in [0, 1].")
    method: str
    n: int
    model_version: int


class Holding(BaseModel):
    asset: str
    weight: float


class PortfolioResponse(BaseModel):
    weights: dict[str, float] = Field(description="Current weight of every asset.")
    top: list[Holding] = Field(description="The largest holdings, by weight.")
    model_version: int


class BlockRequest(_Strict):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"vectors": [[0.1, 0.2], [0.3, -0.1], [1.0, 0.0]]}]},
    )

    id: EventId | None = Field(None, description="Idempotency key of the registration.")
    vectors: list[AnyLearnedVector] = Field(
        min_length=1, description="The block's design vectors (T x d; objects, as x may be)."
    )


class BlockAccepted(BaseModel):
    event_id: str
    T: int = Field(description="Number of vectors registered.")
    summary: dict[str, Any] = Field(
        default_factory=dict, description="The learner's registration summary (dry run)."
    )


# ---- checkpoints ---------------------------------------------------------------------------
class CheckpointOut(BaseModel):
    version: int = Field(description="Checkpoint version (the state hash's `version`).")
    partition: int = Field(description="Partition of the last event the state covers.")
    offset: int = Field(description="Offset of the last event the state covers.")
    event_id: str = Field(description="Id of the event at that offset.")
    ts: float = Field(description="When the checkpoint was written (seconds since the epoch).")
    applied: int | None = Field(
        None, description="Events applied by then; null for entries that cannot be restored."
    )


class RollbackOut(BaseModel):
    event_id: str = Field(description="Id of the rollback control event.")
    version: int = Field(description="The checkpoint version it restored.")
    partition: int = Field(description="Partition of the rollback event.")
    offset: int = Field(description="Offset of the rollback event.")
    discard_after: bool = Field(
        description="The events after the version's stamp up to the rollback were discarded."
    )
    discarded_from: int | None = Field(
        None, description="First offset discarded (the version's stamp + 1); null without."
    )
    discarded_to: int | None = Field(
        None, description="Last offset discarded (the rollback's - 1); null without."
    )
    discarded: int = Field(
        description="Events the model had learned there and no longer holds (0 without)."
    )
    skip_ids: list[str] = Field(description="The event ids it named, never learned.")


class CheckpointList(BaseModel):
    checkpoints: list[CheckpointOut] = Field(description="The kept checkpoints, newest first.")
    rollbacks: list[RollbackOut] = Field(
        default_factory=list,
        description="The applied rollbacks that discarded or skipped events, newest first"
        " (the last 100).",
    )


class RollbackRequest(_Strict):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"version": 7},
                {"version": 7, "discard_after": True},
                {"version": 7, "skip_ids": ["e-1041"]},
            ]
        }
    )

    version: int = Field(ge=1, strict=True, description="A kept checkpoint version.")
    discard_after: bool = Field(
        False,
        strict=True,
        description="Never learn the events between the version's stamp and this rollback:"
        " they are discarded (counted in the model's status as `discarded`, listed under"
        " the checkpoints). false: re-learn them, exactly once.",
    )
    skip_ids: list[EventId] = Field(
        default_factory=list,
        max_length=1000,
        description="Event ids never to learn: dropped as duplicates in the re-learn after"
        " the version's stamp and whenever sent again.",
    )


class RollbackAccepted(BaseModel):
    event_id: str = Field(description="Id of the rollback control event produced to Kafka.")
    version: int = Field(description="The checkpoint version the worker will restore.")
    discard_after: bool = False
    skip_ids: list[str] = Field(default_factory=list)


# ---- health --------------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    # only this: /readyz is open, what failed is in the API's log (docs/security.md)
    status: Literal["ready", "unavailable"]


class SeriesPointOut(BaseModel):
    ts: float = Field(description="Unix time of the sample.")
    version: int = Field(description="Checkpoint version sampled.")
    applied: int = Field(description="Events applied, cumulative.")
    duplicate: int = Field(description="Duplicate events dropped, cumulative.")
    rejected: int = Field(description="Events rejected, cumulative.")
    values: dict[str, float | None] = Field(
        description="The figures the dashboard draws (cumulative_loss, cumulative_regret, rmse,"
        " rmse_window, tracking_error, error_rate, true_prevalence, labelled_events, epsilon,"
        " prevalence_cc, prevalence) that the model reports; null when not finite."
    )


class SeriesOut(BaseModel):
    model: str
    interval_s: float = Field(description="At most one point per this many seconds (0: off).")
    capacity: int = Field(description="Points kept per model; older ones are dropped.")
    points: list[SeriesPointOut] = Field(description="Oldest first.")


class Counters(BaseModel):
    applied: int = Field(0, description="Events learned.")
    duplicate: int = Field(0, description="Events skipped as already learned (same event id).")
    rejected: int = Field(0, description="Events sent to the dead-letter topic.")


#: A model's running figures, one optional field per name the service computes (which
#: ones a model has depends on its task; absent before its first labelled event).
ModelFigures = create_model(  # type: ignore[call-overload]
    "ModelFigures",
    __doc__="A model's running figures (the values /metrics exports for it).",
    **{
        name: (float | None, Field(None, description=help_))
        for name, help_ in FIGURE_HELP.items()
    },
)


class FiguresOut(BaseModel):
    """A model's live figures, read from its latest checkpoint (the dashboard's feed shows
    the same for every model)."""

    id: str
    kind: str
    version: int = Field(description="Of the checkpoint read (0 before the first).")
    counters: Counters
    figures: ModelFigures  # type: ignore[valid-type]
    diagnostics: dict[str, float] = Field(
        description="The learner's last step (names depend on the kind: tau, epsilon, ...)."
    )
    # pairs as lists, as the dashboard's feed has them (a tuple type makes an OpenAPI
    # `items` array that schema validators reject)
    holdings: list[list[str | float]] = Field(
        description="An index tracker's largest positions, [asset, weight] each; else empty."
    )


class DeadLetter(BaseModel):
    """One event the model refused, as its worker listed it (the record itself stays on
    the events topic at ``partition``/``offset``; the dead-letter topic has its value)."""

    reason: str
    event_id: str = Field(description="The event's id ('' when it had none readable).")
    topic: str
    partition: int
    offset: int
    frame_row: int | None = Field(None, description="The row of a frame (docs/events.md §6).")
    time: float = Field(description="Unix time the worker refused it.")


class DeadLetterList(BaseModel):
    model: str
    deadletters: list[DeadLetter] = Field(description="Newest first.")
