"""The seen window (service/worker/seen.py) and its stored layout (service/store/seen.py):
batch decisions equal the event-by-event loop's, evictions inside a batch included; the
blob round-trips, trims like the checkpoint script, and the old layout is migrated."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from collections import OrderedDict

import numpy as np
import pytest

from service.store import seen as layout
from service.store.checkpoints import id_hash
from service.worker import seen as seen_module
from service.worker.adapters.memory_store import MemoryStore
from service.worker.events import Event
from service.worker.runtime import APPLIED, DUPLICATE, SKIPPED, ModelRuntime, load_models
from service.worker.seen import SeenWindow


def _reference(window: OrderedDict[str, None], keep: int, ids: list[str]) -> list[bool]:
    """Today's loop: a duplicate when in the window, else applied (evicting the oldest)."""
    out = []
    for i in ids:
        if i in window:
            out.append(True)
            continue
        out.append(False)
        window[i] = None
        if len(window) > keep:
            window.popitem(last=False)
    return out


@pytest.mark.parametrize("small", [0, 16])  # 0: every batch through the array path
@pytest.mark.parametrize("keep", [1, 2, 3, 5, 8, 50])
@pytest.mark.parametrize("seed", range(20))
def test_batch_decisions_equal_the_loop_evictions_included(
    keep: int, seed: int, small: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seen_module, "FEW", small)
    rng = random.Random(seed)
    alphabet = rng.choice([3, keep + 2, 2 * keep + 3, 40])
    ref: OrderedDict[str, None] = OrderedDict()
    window = SeenWindow(keep)
    applied = 0
    for _ in range(60):
        ids = [f"e{rng.randrange(alphabet)}" for _ in range(rng.randrange(1, keep + 1))]
        expected = _reference(ref, keep, ids)
        dup = window.duplicates(layout.digests(ids))
        assert dup.tolist() == expected
        learned = layout.digests(ids)[~dup]
        window.add(learned, np.arange(applied + 1, applied + 1 + len(learned)), 0.0)
        applied += len(learned)
        assert len(window) == len(ref)
        if rng.random() < 0.2:  # now and then: ids staged in between are moved in first
            assert window.records().digests.tolist() == layout.digests(list(ref)).tolist()
    assert window.records().digests.tolist() == layout.digests(list(ref)).tolist()


def _events(ids: list[str]) -> list[tuple[Event, int, int]]:
    return [(Event("m", i, [1.0, float(k % 5)], float(k % 3)), 0, k) for k, i in enumerate(ids)]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "keep, sizes",
    # the list way, the array way (> FEW), and groups longer than the window (in slices)
    [(6, (1, 7)), (80, (65, 81)), (6, (7, 20)), (80, (81, 300))],
)
def test_handle_many_equals_handle_on_a_full_window(
    seed: int, keep: int, sizes: tuple[int, int]
) -> None:
    rng = random.Random(seed)
    spec = {"id": "m", "kind": "pa", "dim": 2}
    ids = [f"e{rng.randrange(keep + keep // 2)}" for _ in range(50 * keep)]
    items = _events(ids)
    loop = ModelRuntime.create(spec, None, [], seen_keep=keep)
    many = ModelRuntime.create(spec, None, [], seen_keep=keep)
    expected = [loop.handle(*item) for item in items]
    one_by_one = []  # learn, not learn_many: the per-event path, which no group here needs
    many.learner.learn = lambda *a, **k: one_by_one.append(a)  # type: ignore[method-assign]
    got: list[str] = []
    i = 0
    while i < len(items):
        k = rng.randrange(*sizes)
        got += [o for o, _ in many.handle_many(items[i : i + k])]
        i += k
    assert got == expected and {APPLIED, DUPLICATE} <= set(got)
    assert not one_by_one
    assert vars(many.counters) == vars(loop.counters)
    assert many.seen.records() == loop.seen.records()
    assert many.evicted == loop.evicted > 0
    assert many.stamp == loop.stamp
    assert many.learner.state()["w_"].tolist() == loop.learner.state()["w_"].tolist()
    # re-delivered below the stamp: skipped, nothing changes
    assert {o for o, _ in many.handle_many(items[-4:])} == {SKIPPED}


def test_the_blob_round_trips_and_refuses_an_unknown_layout() -> None:
    recs = layout.of_ids([(3, "a"), (4, "b"), (7, "c")])
    blob = layout.encode(recs)
    assert blob[:4] == b"OPSW" and len(blob) == 8 + 3 * 16
    assert layout.decode(blob) == recs
    assert recs.digests.tolist() == [id_hash(i) for i in "abc"]
    assert layout.decode(blob).upto(4) == layout.of_ids([(3, "a"), (4, "b")])
    with pytest.raises(ValueError, match="layout version 2, this code reads 1"):
        layout.decode(blob[:4] + b"\x02" + blob[5:])
    with pytest.raises(ValueError, match="truncated"):
        layout.decode(blob[:-1])


def test_an_append_trims_to_the_newest_keep_after_a_quarter_window() -> None:
    keep, blob = 8, None
    for k in range(1, 11):  # 10 records: more than 8 + 8 // 4 trims back to 8
        blob = layout.append(blob, layout.records(np.array([k]), np.array([k], np.uint64)), keep)
        assert blob is not None
        n = (len(blob) - 8) // 16
        assert n == (k if k <= 10 else 8)
        assert layout.decode(blob).newest(keep).applied.tolist() == list(
            range(max(1, k - keep + 1), k + 1)
        )
    blob = layout.append(blob, layout.records(np.array([11]), np.array([11], np.uint64)), keep)
    assert blob is not None and (len(blob) - 8) // 16 == 8


def test_a_window_in_the_old_layout_is_read_then_stored_whole() -> None:
    async def run() -> None:
        store = MemoryStore(worker_id="w", seen_keep=4)
        spec = {"id": "m", "kind": "pa", "dim": 2}
        store.create(spec)
        first = ModelRuntime.create(spec, None, [], seen_keep=4)
        for item in _events(["a", "b", "c"]):
            first.handle(*item)
        w = first.checkpoint_write("t")
        assert not w.seen_whole
        [res] = await store.write([w], worker_stats={}, deadletters=0)
        first.written(res.version, w.token)
        # as an older worker left it: ids scored by the applied count
        store.seen["m"] = {"a": 1, "b": 2, "c": 3}
        loaded, _ = await load_models(store, ["m"], seen_keep=4)
        rt = loaded["m"]
        assert rt.seen.records() == first.seen.records() and rt.seen.reset
        for item in _events(["a", "b", "c", "d", "e"])[3:]:
            rt.handle(item[0], 0, 10 + item[2])
        assert rt.handle(*_events(["b"])[0][:1], 0, 20) == DUPLICATE
        # an append onto the old layout is refused (the writer reloads)
        stale = first.checkpoint_write("t")
        stale.expected_version, stale.expected_token = rt.version, rt.token
        assert (await store.write([stale], worker_stats={}, deadletters=0))[0].outcome != "ok"
        w = rt.checkpoint_write("t")
        assert w.seen_whole
        [res] = await store.write([w], worker_stats={}, deadletters=0)
        assert res.outcome == "ok"
        rt.written(res.version, w.token)
        blob = store.seen["m"]
        assert isinstance(blob, bytes)
        assert layout.decode(blob) == layout.of_ids([(2, "b"), (3, "c"), (4, "d"), (5, "e")])
        assert not rt.seen.reset and not rt.checkpoint_write("t").seen_whole

    asyncio.run(run())


# ---- the compiled BLAKE2b (service/store/_blake2b.py) -------------------------------------
def _awkward_ids(rng: random.Random) -> list[str]:
    """Every UTF-8 length up to three 128-byte blocks and past, ASCII and multi-byte."""
    ids = ["".join(chr(rng.randrange(32, 127)) for _ in range(n)) for n in range(1, 400)]
    ids += ["é" * n for n in (1, 63, 64, 65, 127, 128, 200)]  # 2 bytes per character
    ids += ["€" + "x" * n for n in (125, 126, 127)]  # a block boundary inside a character
    ids += ["🙂" * 64, "ev-0" * 64]  # 256 bytes, 4 per character; 256 ASCII
    return ids


def test_compiled_digests_equal_hashlibs() -> None:
    pytest.importorskip("numba")
    if os.environ.get("ONLINEPREDICT_KERNELS") == "0":
        pytest.skip("ONLINEPREDICT_KERNELS=0: hashlib on purpose")
    from service.store._blake2b import digest_blob

    assert layout._compiled() is digest_blob  # the test environment runs the compiled path
    rng = random.Random(7)
    ids = _awkward_ids(rng)
    rng.shuffle(ids)
    ascii_ids = [i for i in ids if i.isascii()]
    for batch in (ids, ascii_ids, ids[:8], ascii_ids[:8]):
        assert layout.digests(batch).tolist() == layout.hashlib_digests(batch).tolist()
        assert layout.digests(iter(batch)).tolist() == [id_hash(i) for i in batch]
    raw = [b"", b"a", bytes(range(256)) * 3]  # the empty message: one zero block
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
    out = np.empty(len(raw), np.uint64)
    digest_blob(np.frombuffer(b"".join(raw), np.uint8), offsets, out)
    ref = [int.from_bytes(hashlib.blake2b(r, digest_size=8).digest(), "little") for r in raw]
    assert out.tolist() == ref


def test_digests_of_a_lone_surrogate_raise_as_hashlib_does() -> None:
    ids = ["ok"] * 9 + ["bad\ud800"]
    with pytest.raises(UnicodeEncodeError):
        layout.hashlib_digests(ids)
    with pytest.raises(UnicodeEncodeError):
        layout.digests(ids)


def test_digest_ints_are_id_hashes_on_both_sides_of_the_threshold() -> None:
    ids = [f"ev-{i}" for i in range(20)] + ["é-1", "🙂"]
    for n in (0, 1, 7, 8, 9, len(ids)):
        assert layout.digest_ints(ids[:n]) == [id_hash(i) for i in ids[:n]]
