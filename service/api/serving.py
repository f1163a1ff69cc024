"""Learners served by the API: rebuilt from the latest checkpoint, cached in-process, and
refreshed when the checkpoint's write token (or version, or the spec) changes.

The cache keys on the write token, not on the version alone: a Redis that lost writes (a
restart from an older snapshot, a failover) hands the same version numbers out again for
other states, and a model idle afterwards would be served the lost state for good
(docs/reliability.md, "Redis loses writes")."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass

import learners
from learners.codec import StateCodecError
from service.api.redis_access import RedisAccess
from service.api.schemas import ModelSpec

logger = logging.getLogger(__name__)

CACHE_MODELS = 256  # learners kept in memory; the least recently used is dropped
CACHE_SPECS = 1024  # parsed specs kept by their stored JSON (parsing is per request otherwise)


class CheckpointUnreadable(RuntimeError):
    """A stored checkpoint cannot be decoded: a server-side fault, not bad input."""


@dataclass(frozen=True)
class Served:
    learner: learners.Learner
    version: int  # 0: no checkpoint yet, a fresh learner from the spec
    token: str = ""  # the checkpoint's write token ("" without one): names the state exactly


def build_learner(spec: ModelSpec) -> learners.Learner:
    """A fresh learner; ``ValueError``/``TypeError`` carry the constructor's message."""
    pre = spec.preprocess.model_dump() if spec.preprocess else None
    return learners.build(spec.kind, spec.dim, pre, **spec.params)


# parse_spec's memo: stored bytes -> spec, and id(spec) -> (spec, fingerprint)
_specs: OrderedDict[bytes, ModelSpec] = OrderedDict()
_fingerprints: dict[int, tuple[ModelSpec, str]] = {}


def parse_spec(raw: bytes) -> ModelSpec:
    """The stored spec JSON as a validated ``ModelSpec``, memoised by the raw bytes (a changed
    spec is different bytes, so it is never served stale); the predict hot path."""
    spec = _specs.get(raw)
    if spec is None:
        spec = _specs[raw] = ModelSpec.from_stored(json.loads(raw))
        _fingerprints[id(spec)] = (spec, _dump(spec))
        while len(_specs) > CACHE_SPECS:
            _fingerprints.pop(id(_specs.popitem(last=False)[1]), None)
    return spec


def _dump(spec: ModelSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True)


def _fingerprint(spec: ModelSpec) -> str:
    hit = _fingerprints.get(id(spec))
    return hit[1] if hit is not None and hit[0] is spec else _dump(spec)


@dataclass(frozen=True)
class KnownSpec:
    spec: ModelSpec
    sha1: str  # of the stored JSON bytes: what Redis compares with (``redis.sha1hex``)


class SpecMemo:
    """The last stored spec seen per model id, for the predict hot path: a request is
    checked against it and its predictions are stored only if Redis still holds a spec with
    the same SHA-1 (``RedisAccess.store_checked_predictions``), so a stale entry costs a second
    round trip, never a wrong answer."""

    def __init__(self, size: int = CACHE_SPECS) -> None:
        self._size = size
        self._entries: OrderedDict[str, KnownSpec] = OrderedDict()

    def get(self, model: str) -> KnownSpec | None:
        return self._entries.get(model)

    def learn(self, model: str, raw: bytes) -> KnownSpec:
        """Parse (memoised by bytes) and remember the stored spec of ``model``."""
        known = KnownSpec(parse_spec(raw), hashlib.sha1(raw, usedforsecurity=False).hexdigest())
        self._entries[model] = known
        self._entries.move_to_end(model)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return known

    def forget(self, model: str) -> None:
        self._entries.pop(model, None)


class ModelCache:
    def __init__(self, store: RedisAccess, size: int = CACHE_MODELS) -> None:
        self._store = store
        self._size = size
        self._entries: OrderedDict[str, tuple[str, Served]] = OrderedDict()

    async def get(
        self, spec: ModelSpec, version: int | None = None, token: str | None = None
    ) -> Served:
        """The learner at the latest checkpoint: one HMGET when the cached state is current,
        none when the caller read ``version`` and ``token`` already (another checkpoint is
        loaded then). A cached learner is served only for the same version *and* write
        token."""
        fp = _fingerprint(spec)
        if version is None or token is None:
            version, token = await self._store.head(spec.id)
        hit = self._entries.get(spec.id)
        if hit is not None and hit[0] == fp and hit[1].version == version and hit[1].token == token:
            self._entries.move_to_end(spec.id)
            return hit[1]
        served = await self._load(spec)
        self._entries[spec.id] = (fp, served)
        self._entries.move_to_end(spec.id)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return served

    def forget(self, model: str) -> None:
        self._entries.pop(model, None)

    async def _load(self, spec: ModelSpec) -> Served:
        blob, version, token = await self._store.checkpoint(spec.id)
        if blob is None:
            return Served(build_learner(spec), version, token)
        try:
            learner = learners.load_state(learners.decode_state(blob))
        except (StateCodecError, ValueError, TypeError, KeyError) as exc:
            logger.error(
                "checkpoint of model %r (version %d) unreadable: %s", spec.id, version, exc
            )
            raise CheckpointUnreadable(
                f"the checkpoint of model {spec.id!r} (version {version}) cannot be read"
            ) from exc
        if learner.kind != spec.kind or learner.dim != spec.dim:
            # A leftover of a deleted model with the same id: serve the spec, not the stale state.
            logger.warning(
                "checkpoint of %r is a %s/%d, spec says %s/%d; serving a fresh learner",
                spec.id,
                learner.kind,
                learner.dim,
                spec.kind,
                spec.dim,
            )
            return Served(build_learner(spec), version, token)
        return Served(learner, version, token)
