"""``Audit``: a running worker checks that its two ports still hold what it believes
(docs/reliability.md, "Ordinary operations").

- **The log.** A partition can change under a running worker: its tail lost and new
  records written at the old offsets (an unclean leader election, replication factor 1,
  a topic deleted and re-created). Two signs: the last record handled before the last
  checkpoint (the partition's *witness*) is no longer at its offset when the next
  checkpoint is written, or a record below the next offset expected arrives without a seek
  and the newest record handled is gone too (the client fell off the log's end and
  started over). ``Checkpointer.verify_log`` finds them and drops their models unwritten;
  :meth:`Audit.restore` restores those partitions from the checkpoints, as an assignment
  does: stamps are checked, a void one goes through the divergence search
  (``divergence.py``), and the partition is read again from there.
- **The store.** Redis may lose writes it acknowledged (AOF ``everysec``, an async
  replica's failover). A model written since notices at its next write (the version and
  token check); an idle one would not, and would keep a stored state without those events
  while its worker believes it current. So whenever the store's epoch (Redis's
  ``run_id``) changed, each model's stored version and token are compared with the
  worker's, and a model that differs is reloaded and its partition replayed.
"""

from __future__ import annotations

import logging

from service.worker.checkpointer import Checkpointer
from service.worker.context import WorkerContext
from service.worker.rebalance import Rebalance

logger = logging.getLogger(__name__)


class Audit:
    def __init__(self, ctx: WorkerContext, checkpoint: Checkpointer, rebalance: Rebalance) -> None:
        self.ctx = ctx
        self.checkpoint = checkpoint
        self.rebalance = rebalance
        self.epoch: str | None = None  # the store's, as of the last comparison
        self.last = float("-inf")  # clock() at the last store check

    def due(self) -> bool:
        """The store's epoch is checked every ``commit_interval_s``, with or without events."""
        return self.ctx.clock() - self.last >= self.ctx.settings.commit_interval_s

    async def check_log(self) -> None:
        """Records below the next offset came: verify the log now, restore what changed."""
        await self.checkpoint.verify_log()
        await self.restore()

    async def restore(self) -> None:
        """Restore the partitions ``Checkpointer.verify_log`` found changed, still assigned."""
        changed, self.checkpoint.changed = self.checkpoint.changed, set()
        assigned = self.ctx.log.assignment()
        for tp in sorted(changed & assigned):
            await self.rebalance.restore_partition(tp)

    async def check_store(self) -> None:
        """When the store's epoch changed: reload every model whose stored version and
        token are not the ones this worker holds."""
        self.last = self.ctx.clock()
        epoch = await self.ctx.store.epoch()  # read first: a loss after it changes it again
        if epoch == self.epoch:
            return
        self.epoch = epoch
        ids = sorted(self.ctx.models)
        heads = await self.ctx.store.heads(ids) if ids else {}
        for model in ids:
            rt = self.ctx.models.get(model)
            head = heads.get(model, (0, ""))
            if rt is None or head == (rt.version, rt.token):
                continue
            self.ctx.stats.conflicts += 1
            logger.error(
                "model %r: the store no longer holds version %d (it lost writes: restarted"
                " or failed over); reloading its stored version %d",
                model,
                rt.version,
                head[0],
            )
            await self.checkpoint.resync(model)
