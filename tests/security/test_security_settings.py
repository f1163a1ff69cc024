"""Security settings reach the clients: Kafka SASL/SSL options, Redis ACL user/password and
TLS (``rediss://``) URLs, in the worker's and the API's clients; secrets never show in a
``repr``. No broker or Redis needed: no client here connects."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest
from aiokafka import AIOKafkaProducer
from fastapi.testclient import TestClient
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection

from service.api import create_app
from service.config import Settings
from service.worker.adapters.kafka_log import KafkaLog
from service.worker.adapters.redis_store import RedisStore
from service.worker.loop import build_worker

SASL_PW = "sasl-pw-Zq81"
REDIS_PW = "redis-pw-Xk42"
API_KEY = "api-key-Wm77"


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(crt), "-subj", "/CN=op-test-ca"],
        check=True,
        capture_output=True,
    )
    return str(crt), str(key)


def _secure(cert: tuple[str, str], **over: object) -> Settings:
    crt, key = cert
    values: dict[str, object] = {
        "kafka_bootstrap": "kafka.internal:9093",
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "op-user",
        "kafka_sasl_password": SASL_PW,
        "kafka_ssl_cafile": crt,
        "kafka_ssl_certfile": crt,
        "kafka_ssl_keyfile": key,
        "redis_url": f"rediss://op-acl:{REDIS_PW}@redis.internal:6380/2?ssl_cert_reqs=required"
        f"&ssl_ca_certs={crt}",
        "api_key": API_KEY,
    }
    values.update(over)
    return Settings(**values)  # type: ignore[arg-type]


def test_kafka_sasl_ssl_options(cert) -> None:  # type: ignore[no-untyped-def]
    opts = _secure(cert).kafka_options()
    assert opts["bootstrap_servers"] == "kafka.internal:9093"
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert opts["sasl_plain_username"] == "op-user"
    assert opts["sasl_plain_password"] == SASL_PW
    ctx = opts["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED
    assert [dict(x[0] for x in c["subject"]) for c in ctx.get_ca_certs()] == [
        {"commonName": "op-test-ca"}
    ]


def test_kafka_plaintext_and_sasl_plaintext_have_no_tls(cert) -> None:  # type: ignore[no-untyped-def]
    plain = _secure(cert, kafka_security_protocol="PLAINTEXT", kafka_sasl_mechanism=None)
    assert "ssl_context" not in plain.kafka_options()
    assert "sasl_plain_password" not in plain.kafka_options()
    sasl = _secure(cert, kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="PLAIN")
    opts = sasl.kafka_options()
    assert "ssl_context" not in opts and opts["sasl_mechanism"] == "PLAIN"


def test_invalid_security_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="security_protocol"):
        Settings(kafka_security_protocol="SSL_PLEASE")  # type: ignore[arg-type]


def test_placeholder_api_key_refused_in_production() -> None:
    with pytest.raises(ValueError, match="changethis"):
        Settings(api_key="changethis", env="production")  # type: ignore[arg-type]


def test_secrets_are_hidden_in_repr_and_dumps(cert) -> None:  # type: ignore[no-untyped-def]
    st = _secure(cert)
    shown = repr(st) + str(st) + str(st.model_dump())
    assert SASL_PW not in shown and API_KEY not in shown
    # The Redis password lives in the URL (redis-py's convention): it is a plain str field,
    # so it is only hidden where the code masks it (see test_security_logs.py).
    assert "**********" in shown


def _redis_checks(redis: Redis, crt: str) -> None:
    pool = redis.connection_pool
    kw = pool.connection_kwargs
    assert pool.connection_class is SSLConnection
    assert (kw["username"], kw["password"]) == ("op-acl", REDIS_PW)
    assert (kw["host"], kw["port"], kw["db"]) == ("redis.internal", 6380, 2)
    assert kw["ssl_cert_reqs"] == "required" and kw["ssl_ca_certs"] == crt


async def test_worker_clients_get_the_security_settings(cert) -> None:  # type: ignore[no-untyped-def]
    worker = build_worker(_secure(cert), worker_id="sec")
    log, store = worker.log, worker.store
    assert isinstance(log, KafkaLog) and isinstance(store, RedisStore)
    try:
        _redis_checks(store.redis, cert[0])
        for client in (log.consumer._client, log.producer.client, log.probe._client):  # noqa: SLF001
            assert client._security_protocol == "SASL_SSL"  # noqa: SLF001
            assert client._sasl_mechanism == "SCRAM-SHA-512"  # noqa: SLF001
            assert client._sasl_plain_password == SASL_PW  # noqa: SLF001
            assert isinstance(client._ssl_context, ssl.SSLContext)  # noqa: SLF001
    finally:
        await store.close()


def test_api_clients_get_the_security_settings(cert) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(_secure(cert))) as api:
        store = api.app_state["store"]
        _redis_checks(store.redis, cert[0])
        lazy = api.app_state["producer"]

        async def build() -> AIOKafkaProducer:
            # what LazyProducer.get() builds, without connecting
            return AIOKafkaProducer(**lazy._settings.kafka_options())  # noqa: SLF001

        producer = api.portal.call(build)  # type: ignore[union-attr]
        assert producer.client._sasl_plain_password == SASL_PW  # noqa: SLF001
        assert producer.client._security_protocol == "SASL_SSL"  # noqa: SLF001
