"""Settings for every onlinepredict process: one class, env prefix ``ONLINEPREDICT_``.

Every variable is listed with its default in ``deploy/.env.example``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Read by the API process only: `onlinepredict up` and the embedded servers pass them to no
# other process (workers, the broker, Redis); docs/security.md, "Keys and scopes"
API_ONLY_ENV = frozenset(
    {"ONLINEPREDICT_API_KEY", "ONLINEPREDICT_API_KEYS", "ONLINEPREDICT_API_KEYS_FILE"}
)


def without_api_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the API's keys (for any child process but the API)."""
    return {k: v for k, v in env.items() if k not in API_ONLY_ENV}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ONLINEPREDICT_",
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        # a validation error names the setting, never echoes the inputs (secrets among them)
        hide_input_in_errors=True,
    )

    # --- Kafka -----------------------------------------------------------------------------
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = None
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None
    events_topic: str = "onlinepredict.events"
    deadletter_topic: str = "onlinepredict.deadletter"
    consumer_group: str = "onlinepredict-workers"
    partitions: int = Field(default=4, ge=1, le=1024)

    # --- Redis -----------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"  # rediss:// for TLS, user:pass@ for ACL users
    # "cluster": redis_url names one startup node of a Redis Cluster (service/store/connect.py)
    redis_mode: Literal["standalone", "cluster"] = "standalone"
    key_prefix: str = "onlinepredict:"
    # the embedded redis-server's cap (`onlinepredict up`, the tests; service/embedded/stack.py):
    # bytes or Redis units ("200mb" = 200 MiB, "2gb", "0" = none); "auto" = a quarter of the
    # machine's memory, at least 256 MiB, at most 8 GiB. It runs with `noeviction`: full, it
    # refuses writes (API 503, workers wait; docs/reliability.md, "When Redis is full")
    redis_maxmemory: str = Field(
        default="auto", pattern=r"(?i)^\s*(auto|\d+\s*(b|k|kb|m|mb|g|gb)?)\s*$"
    )

    # --- worker ----------------------------------------------------------------------------
    # events between checkpoints: bounds what a crash replays, with commit_interval_s. A
    # checkpoint first reads its witness record back from the broker (16-30 ms on tansu),
    # so at 5,000 a worker learning 250k events/s idled half its time (benchmarks/README.md)
    commit_every: int = Field(default=50_000, ge=1)
    commit_interval_s: float = Field(default=2.0, gt=0)  # seconds between checkpoints
    history_keep: int = Field(default=10, ge=0)  # checkpoints kept per model for rollback
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)  # 0 = no metrics server
    worker_metrics_host: str = "0.0.0.0"  # all interfaces: Prometheus scrapes from elsewhere
    # records per poll (a frame is one). Each model's examples in a poll are learned as one
    # group with per-group costs (snapshot, checks, statistics): at 100 models, d = 20, a poll
    # of 2,000 gave groups of ~60 events and 8,000 of ~220, +12-15% events/s; it holds the
    # loop ~60-70 ms of CPU at d = 20, ~150 ms at d = 100 (benchmarks/README.md, "Larger polls")
    max_poll_records: int = Field(default=8000, ge=1)
    # a dead worker's partitions move to the others after this long
    consumer_session_timeout_ms: int = Field(default=10_000, ge=1000)
    # how long the broker may hold a worker's fetch that finds nothing new: short on the
    # in-memory log (service/worker/adapters/kafka_log.py says why); tansu's s3 engine
    # (`up --durable`) stalls below ~100 ms, so `up --durable` gives its workers 250
    fetch_max_wait_ms: int = Field(default=20, ge=1, le=60_000)
    # recent event ids per model kept for dedupe; at most 10M: their blob (16 bytes per id,
    # up to 1.25x between trims) stays under Redis's 512 MB limit for one value
    seen_ids_keep: int = Field(default=10_000, ge=0, le=10_000_000)
    redis_retry_max_s: float = Field(default=5.0, gt=0)  # backoff cap while Redis is down
    # after SIGTERM a worker is gone within this many seconds, whatever state it is in
    # (docs/reliability.md, "Stopping"); under Kubernetes' default 30 s grace, with room
    worker_stop_timeout_s: float = Field(default=20.0, ge=1.0, le=600.0)
    # a draining stop (`onlinepredict up`'s Ctrl-C, `onlinepredict worker --drain`) first
    # learns to the end of the log for up to this long, then stops as above; 0: no drain
    drain_timeout_s: float = Field(default=60.0, ge=0.0, le=3600.0)
    topic_replication: int = Field(default=1, ge=1)  # replication factor when creating topics

    # --- API -------------------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    # per-request access lines and the Kafka client's INFO chatter (`up --verbose`): off,
    # they were 11k lines in 7 minutes of `up` (issue 34)
    log_verbose: bool = False
    # API keys (docs/security.md, "Keys and scopes"): once any is set, every /v1 route needs
    # a key of the route's scope. api_key is one admin key (named "default"); api_keys lists
    # name:scopes:secret[:prefix] entries; api_keys_file the same, re-read on SIGHUP/mtime
    api_key: SecretStr | None = None
    api_keys: SecretStr | None = None
    api_keys_file: str | None = None
    # no key on a non-loopback api_host: refuse to start unless this says open on purpose
    allow_anonymous: bool = False
    api_key_on_reads: bool | None = None  # deprecated and ignored: keys always apply to reads
    # the Prometheus exposition (per-model figures) on a listener of its own, started by
    # the API process; 0 = none. The API port's /metrics needs the read scope.
    metrics_port: int = Field(default=9101, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    prediction_ttl_s: int = Field(default=86_400, ge=1)  # how long a prediction waits for its label
    # predicted rows kept per model for their labels, oldest request dropped first (a label
    # for a dropped one is a 404 saying so): bounds what predicts can hold in Redis
    max_predictions: int = Field(default=1_000_000, ge=1)
    # how long an Idempotency-Key's request fingerprint is kept (a reused key with another
    # body is a 422 within it; docs/design.md, "Idempotency-Key")
    idempotency_ttl_s: int = Field(default=86_400, ge=1)
    # how POST /v1/models/{id}/events produces a batch: one binary frame (docs/events.md §6)
    # when the batch allows it (one ts for all), else JSON; "json": always one record each
    events_wire_format: Literal["frame", "json"] = "frame"
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_dim: int = Field(default=100_000, ge=1)
    max_batch: int = Field(default=10_000, ge=1)
    # learned state a new model may declare (learner + running statistics, checked at
    # creation): 256 MiB keeps a checkpoint well under Redis's 512 MB limit for one value
    max_state_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    # the dashboard's history (GET /v1/models/{id}/series): one point per model at most
    # every series_interval_s (0 = no sampling), the last series_points kept in Redis
    # (720 at 5 s: an hour, ~200 KB per model)
    series_interval_s: float = Field(default=5.0, ge=0)
    series_points: int = Field(default=720, ge=1, le=10_000)

    # --- cost limits (docs/security.md, "Limits"; service/api/middleware.py, cost.py) ------
    # requests per key (per client address without a key) and scope, shared by every API
    # through Redis: "scope=N/s" (or /m, /h) entries over these defaults, "scope=off" lifts
    # one, "off" all; generous: the tests and `up --demo` stay far below (benchmarks/predict.py's
    # closed loop does not: it sets "off")
    rate_limits: str = Field(
        default="read=2000/s,predict=2000/s,ingest=5000/s,admin=100/s",
        pattern=r"(?i)^\s*(off|none|0|(read|predict|ingest|admin)\s*=\s*(off|\d+\s*/\s*[smh])"
        r"(\s*,\s*(read|predict|ingest|admin)\s*=\s*(off|\d+\s*/\s*[smh]))*)?\s*,?\s*$",
    )
    # one request's estimated CPU (predict, quantify, events): rows x per-row cost of the
    # kind, in units of ~1 ns of API CPU here (service/api/cost.py); 0 = no limit. 1e9
    # (~1 s): a dvaw-sa d = 100 model predicts ~580 rows per request, a linear one 10,000
    max_request_cost: int = Field(default=1_000_000_000, ge=0)
    # requests worked on at once per API process (a body is read first, under the body
    # timeout, without a slot); over it: 503 with Retry-After. /healthz is exempt
    max_concurrency: int = Field(default=64, ge=1)
    # a connection's request line and headers must arrive within header_timeout_s, its
    # body within body_timeout_s of the headers (else closed / 408)
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    # models at once, and their declared state counted with the kept history
    # (state x (1 + history_keep)) over all models; 0 = no cap
    max_models: int = Field(default=10_000, ge=0)
    max_total_state_bytes: int = Field(default=16 * 1024**3, ge=0)

    # --- observability (`onlinepredict up --observe`) ----------------------------------------
    prometheus_port: int = Field(default=9090, ge=1, le=65535)  # the local Prometheus

    env: Literal["development", "production"] = "development"

    def environment(self) -> dict[str, str]:
        """The ``ONLINEPREDICT_*`` variables that give a child process these settings
        (secrets unwrapped; unset values left out so they fall back to the default)."""
        env: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[f"ONLINEPREDICT_{name.upper()}"] = str(value)
        return env

    def child_environment(self, **extra: str) -> dict[str, str]:
        """``os.environ`` without its own ``ONLINEPREDICT_*`` variables, plus ours and ``extra``."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("ONLINEPREDICT_")}
        return {**base, **self.environment(), **extra}

    def kafka_options(self) -> dict[str, Any]:
        """Connection keyword arguments for aiokafka clients (security passthrough)."""
        opts: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap,
            "security_protocol": self.kafka_security_protocol,
        }
        if self.kafka_sasl_mechanism:
            opts["sasl_mechanism"] = self.kafka_sasl_mechanism
            opts["sasl_plain_username"] = self.kafka_sasl_username
            if self.kafka_sasl_password is not None:
                opts["sasl_plain_password"] = self.kafka_sasl_password.get_secret_value()
        if self.kafka_security_protocol in ("SSL", "SASL_SSL"):
            ctx = ssl.create_default_context(cafile=self.kafka_ssl_cafile)
            if self.kafka_ssl_certfile:
                ctx.load_cert_chain(self.kafka_ssl_certfile, self.kafka_ssl_keyfile)
            opts["ssl_context"] = ctx
        return opts

    @model_validator(mode="after")
    def _check_secrets(self) -> Settings:
        key = self.api_key.get_secret_value() if self.api_key else None
        if key == "changethis" and self.env == "production":
            raise ValueError("ONLINEPREDICT_API_KEY is the placeholder 'changethis'")
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
