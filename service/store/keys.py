"""Every Redis key string, prefix-aware (docs/design.md, "Checkpoints"). Nothing else builds keys.

``{id}`` is a Redis Cluster hash tag, so one model's keys share a slot.

``model:{id}:state`` is a hash with the fields
``state`` (codec blob of the learner's ``state()``), ``version`` (int, bumped on every write),
the stamp of the last event applied: ``partition``, ``offset``, ``event_id``, and the
per-model event counters ``applied``, ``duplicate``, ``rejected`` (ints, cumulative), so the
API's ``/metrics`` shows the same figures whichever worker owns the model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "onlinepredict:"

    def spec(self, model: str) -> str:
        return f"{self.prefix}model:{{{model}}}:spec"

    def state(self, model: str) -> str:
        return f"{self.prefix}model:{{{model}}}:state"

    def history(self, model: str) -> str:
        return f"{self.prefix}model:{{{model}}}:history"

    def rollbacks(self, model: str) -> str:
        """Hash: the model's applied rollbacks that discarded or skipped events (field: the
        rollback event's id; value: JSON of the version, the offsets discarded, their count
        and the skipped ids), the last ``ROLLBACKS_KEEP`` (``service/store/checkpoints.py``)."""
        return f"{self.prefix}model:{{{model}}}:rollbacks"

    def series(self, model: str) -> str:
        """List of the model's sampled figures (JSON points, oldest first), capped by the API
        (``service/store/series.py``)."""
        return f"{self.prefix}model:{{{model}}}:series"

    def series_gate(self) -> str:
        """String with a TTL: whichever API process sets it samples the series this interval."""
        return f"{self.prefix}series:gate"

    def seen(self, model: str) -> str:
        """String: the model's seen window (digests of its recent event ids, one blob;
        ``service/store/seen.py``), for dedupe beyond the offset stamp."""
        return f"{self.prefix}model:{{{model}}}:seen"

    def prediction(self, model: str, prediction_id: str) -> str:
        return f"{self.prefix}model:{{{model}}}:prediction:{prediction_id}"

    def predictions(self, model: str, batch: str) -> str:
        """Hash: one predict request's rows awaiting labels (``clients.batch_answer``: the
        ids ``<batch>.<row>``); docs/design.md, "Redis keys"."""
        return f"{self.prefix}model:{{{model}}}:predictions:{batch}"

    def predictions_index(self, model: str) -> str:
        """Sorted set: the model's stored batch records (member: batch id; score: the rows
        stored up to and including it), for the bound ``ONLINEPREDICT_MAX_PREDICTIONS``
        (``service/api/redis_access.py``, ``_STORE_BATCH``)."""
        return f"{self.prefix}model:{{{model}}}:predictions-index"

    def dropped(self, model: str) -> str:
        """Sorted set: the ids of the model's last batch records dropped for that bound
        (newest last), so a label for one is a 404 that says so."""
        return f"{self.prefix}model:{{{model}}}:predictions-dropped"

    def idempotency(self, model: str, key_digest: str) -> str:
        """String: the fingerprint of the request that first used an ``Idempotency-Key``
        (``key_digest``: its SHA-256 hex, so any key is a safe key suffix), with a TTL."""
        return f"{self.prefix}model:{{{model}}}:idempotency:{key_digest}"

    def deadletters(self, model: str) -> str:
        """List: the model's newest dead letters (JSON, newest first, capped; written by the
        worker with its checkpoints, service/worker/refusals.py)."""
        return f"{self.prefix}model:{{{model}}}:deadletters"

    def refused(self, model: str) -> str:
        """Hash: the model's recent refused share (``events``, ``refused``, ``at``)."""
        return f"{self.prefix}model:{{{model}}}:refused"

    def deadletter_count(self) -> str:
        """Integer: events sent to the dead-letter topic, all workers together."""
        return f"{self.prefix}deadletter:count"

    def models(self) -> str:
        """Set of all model ids."""
        return f"{self.prefix}models"

    def partition_models(self, topic: str, partition: int) -> str:
        return f"{self.prefix}partition-models:{topic}:{partition}"

    def worker(self, worker_id: str) -> str:
        """Hash of one worker's counters (processed, applied, checkpoints, ...), with a TTL."""
        return f"{self.prefix}worker:{worker_id}"
