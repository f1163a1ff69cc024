"""numba's compiled kernels kept per user across clones, for the test session.

numba caches compiled code next to the source (``learners/__pycache__``,
``service/store/__pycache__``), so every fresh clone compiled the kernels again (~25 s of
CPU). ``NUMBA_CACHE_DIR`` alone does not help: numba files its cache there under a hash of
the source's absolute directory, so a clone in another folder still misses. numba checks a
cached kernel by the source's content (and its own version and the CPU), not by its path,
so the files can be copied: :func:`compiled` restores them from a slot keyed by the
sources' content before compiling, and fills the slot after. The slot is only a
shortcut: a missing or unwritable one means numba compiles, as on a new machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the modules with ``njit(cache=True)`` kernels
SOURCES = (ROOT / "learners" / "_kernels.py", ROOT / "service" / "store" / "_blake2b.py")
#: slots kept (one per version of the sources, numba and Python); older ones are removed
KEEP = 6


def shared_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onlinepredict-numba"


def _cached_files(source: Path) -> list[Path]:
    """numba's index (.nbi) and data (.nbc) files of ``source`` in its ``__pycache__``."""
    cache = source.parent / "__pycache__"
    if not cache.is_dir():
        return []
    return [p for p in cache.glob(f"{source.stem}.*") if p.suffix in (".nbi", ".nbc")]


def _key() -> str:
    import numba

    h = hashlib.sha256(f"{numba.__version__} {sys.version}".encode())
    for source in SOURCES:
        h.update(source.read_bytes())
    return h.hexdigest()[:24]


def _restore(slot: Path) -> None:
    for source in SOURCES:
        if _cached_files(source):
            continue  # this tree has its own cache: numba decides whether it is fresh
        saved = slot / source.stem
        if saved.is_dir():
            cache = source.parent / "__pycache__"
            cache.mkdir(exist_ok=True)
            # data before indexes, each whole (a temporary name, then renamed): an index
            # without its data is a miss for numba, a torn file would be an error
            for f in sorted(saved.iterdir(), key=lambda f: f.suffix == ".nbi"):
                tmp = cache / f".{f.name}.tmp"
                shutil.copy2(f, tmp)
                tmp.replace(cache / f.name)


def _listing(files: list[Path]) -> set[tuple[str, int]]:
    return {(f.name, f.stat().st_size) for f in files}


def _save(slot: Path) -> None:
    """The tree's cache into ``slot``, when it holds more or other files than the slot
    (the tests may compile kernels for types ``warm`` does not)."""
    if slot.exists() and all(
        _listing(_cached_files(s)) <= _listing(list((slot / s.stem).glob("*"))) for s in SOURCES
    ):
        os.utime(slot)  # recently used: kept by the pruning
        return
    tmp = Path(tempfile.mkdtemp(dir=slot.parent, prefix=".tmp-"))
    old = slot.parent / f".old-{tmp.name}"
    try:
        for source in SOURCES:
            (tmp / source.stem).mkdir()
            for f in _cached_files(source):
                shutil.copy2(f, tmp / source.stem / f.name)
        if slot.exists():
            slot.rename(old)
        tmp.rename(slot)  # whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    slots = sorted(
        (p for p in slot.parent.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for stale in slots[:-KEEP]:
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def _locked() -> Iterator[Path | None]:
    """The per-user directory, held by this process alone; None when there is none."""
    shared = shared_dir()
    try:
        shared.mkdir(parents=True, exist_ok=True)
        lock = open(shared / ".lock", "w")  # noqa: SIM115 (closed below)
    except OSError:
        yield None
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield shared


def compiled(warm: Callable[[], None]) -> None:
    """Run ``warm`` (compile every kernel or load it from numba's cache) with this tree's
    cache first restored from the per-user slot, and the slot filled after; one process
    at a time (the others, xdist's workers too, then load what it compiled)."""
    with _locked() as shared:
        if shared is None:
            warm()  # no writable per-user cache: numba's own cache in the tree
            return
        slot = shared / _key()
        try:
            _restore(slot)
        except OSError:
            pass  # a damaged slot: numba compiles
        warm()
        with contextlib.suppress(OSError):
            _save(slot)


def save() -> None:
    """Keep what this tree compiled (at the end of a session: kernels compiled by tests
    for other types too)."""
    with _locked() as shared:
        if shared is not None:
            with contextlib.suppress(OSError):
                _save(shared / _key())
