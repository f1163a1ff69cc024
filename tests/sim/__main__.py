"""``python -m tests.sim --seeds N`` (seeds 0..N-1) or ``--seed S`` (one, shrunk on failure)."""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tests.sim.faults import parse
from tests.sim.run import run_seed, schedule_of, shrink


def violating_seeds(
    args: tuple[int, int, bool, bool] | tuple[int, int, bool, bool, bool],
) -> list[tuple[int, list[str]]]:
    """The failing seeds of a range (the fifth switch: frames in the stream)."""
    start, stop, truncation, strict = args[:4]
    frames = bool(args[4]) if len(args) > 4 else False  # type: ignore[misc]
    out = []
    for seed in range(start, stop):
        res = run_seed(seed, truncation=truncation, strict_drain=strict, frames=frames)
        if res.violations:
            out.append((seed, res.violations))
    return out


def reproduce(
    seed: int,
    truncation: bool = False,
    strict: bool = False,
    faults: str = "",
    frames: bool = False,
) -> str:
    """The minimal reproduction of a failing seed, as text."""
    switches = {"truncation": truncation, "strict_drain": strict, "frames": frames}
    schedule = parse(faults) if faults else schedule_of(seed, truncation)
    res = run_seed(seed, schedule, **switches)
    if not res.violations:
        return f"seed {seed}: ok ({res.events} events, faults {'; '.join(map(str, schedule))})"
    small = shrink(seed, schedule, **switches)
    again = run_seed(seed, small, **switches)
    flags = (
        (" --truncation" if truncation else "")
        + (" --strict-drain" if strict else "")
        + (" --frames" if frames else "")
    )
    lines = [
        f"seed {seed}: VIOLATION",
        *(f"  {v}" for v in again.violations or res.violations),
        f"  full schedule: {'; '.join(map(str, schedule))}",
        f"  shrunk schedule: {'; '.join(map(str, small)) or '(no faults)'}",
        "  trace:",
        *(f"    {t}" for t in again.trace[-25:]),
        f"  rerun: .venv/bin/python -m tests.sim --seed {seed}{flags}"
        f" --faults '{'; '.join(map(str, small))}'"
        f"   (or: make sim SEED={seed}{' SIM_FLAGS=' + repr(flags.strip()) if flags else ''})",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim")
    ap.add_argument("--seeds", type=int, default=1000, help="run seeds 0..N-1")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, help="run one seed; shrink its faults if it fails")
    ap.add_argument("--faults", default="", help="a schedule to run instead of the seed's")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--truncation", action="store_true", help="the log loses tails (issue 14)")
    ap.add_argument(
        "--strict-drain", action="store_true", help="drain with no event after the faults"
    )
    ap.add_argument("--frames", action="store_true", help="binary frames in the stream too")
    a = ap.parse_args()
    if a.seed is not None:
        text = reproduce(a.seed, a.truncation, a.strict_drain, a.faults, a.frames)
        print(text)
        return 1 if "VIOLATION" in text else 0
    started = time.perf_counter()
    chunk = 200
    tasks = [
        (s, min(s + chunk, a.start + a.seeds), a.truncation, a.strict_drain, a.frames)
        for s in range(a.start, a.start + a.seeds, chunk)
    ]
    failed: list[tuple[int, list[str]]] = []
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for found in pool.map(violating_seeds, tasks):
            failed += found
    elapsed = time.perf_counter() - started
    for seed, violations in failed[:10]:
        print(f"seed {seed}: {violations[0]}")
    if failed:
        print("\n" + reproduce(failed[0][0], a.truncation, a.strict_drain, "", a.frames))
    print(
        f"seeds run: {a.seeds} (from {a.start}); violations: {len(failed)} seeds;"
        f" time: {elapsed:.1f} s ({a.seeds / elapsed:.1f} seeds/s, {a.jobs} jobs)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
