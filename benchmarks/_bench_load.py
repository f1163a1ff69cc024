"""HTTP load generator for ``benchmarks/predict.py``, run as a separate process.

A minimal HTTP/1.1 keep-alive client on raw asyncio streams (uvloop when installed): the
same POST over ``--conns`` connections. An httpx client spends ~10x more CPU per request
than this one, and on a 2-core machine the generator must not be what saturates.

* ``--rate 0``: closed loop, every connection sends its next request when the previous
  answer arrives: the maximum rate the server sustains.
* ``--rate R``: open loop at R requests/s spread over the connections; latency is measured
  from the *scheduled* send time, so a stalled server is not hidden (no coordinated
  omission).

Prints one JSON object: total_requests (warm-up included), requests (timed), errors,
statuses, seconds, rate, p50_ms, p90_ms, p99_ms, max_ms.

    python benchmarks/_bench_load.py --port 8000 --path /v1/models/m/predict \
        --body-file body.json --conns 16 --seconds 5 [--rate 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

try:
    import uvloop
except ImportError:  # pragma: no cover - plain asyncio works too, a little slower
    uvloop = None


def request_bytes(
    host: str,
    port: int,
    path: str,
    body: bytes,
    content_type: str = "application/json",
    accept: str = "",
    headers: tuple[str, ...] = (),
) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
        + (f"Accept: {accept}\r\n" if accept else "")
        + "".join(f"{h}\r\n" for h in headers)
        + f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    if length:
        await reader.readexactly(length)
    return status


async def connection(
    args: argparse.Namespace,
    req: bytes,
    t_start: float,
    t_end: float,
    offset: float,
    lat: list[float],
    statuses: dict[int, int],
) -> None:
    reader, writer = await asyncio.open_connection(args.host, args.port)
    interval = args.conns / args.rate if args.rate > 0 else 0.0
    k = 0
    try:
        while True:
            if interval:
                planned = t_start + offset + k * interval
                k += 1
                if planned >= t_end:
                    break
                delay = planned - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                planned = time.perf_counter()
                if planned >= t_end:
                    break
            writer.write(req)
            status = await read_response(reader)
            done = time.perf_counter()
            statuses[0] = statuses.get(0, 0) + 1  # every request, warm-up included
            if planned >= t_start + args.warmup:
                lat.append(done - planned)
                statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


def pct(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


async def run(args: argparse.Namespace) -> dict[str, object]:
    with open(args.body_file, "rb") as fh:
        body = fh.read()
    req = request_bytes(
        args.host, args.port, args.path, body, args.content_type, args.accept, tuple(args.header)
    )
    lat: list[float] = []
    statuses: dict[int, int] = {}
    t_start = time.perf_counter() + 0.05
    t_end = t_start + args.warmup + args.seconds
    interval = args.conns / args.rate if args.rate > 0 else 0.0
    tasks = [
        connection(args, req, t_start, t_end, i * interval / args.conns, lat, statuses)
        for i in range(args.conns)
    ]
    await asyncio.gather(*tasks)
    ms = sorted(1e3 * v for v in lat)
    total = statuses.pop(0, 0)
    ok = sum(n for s, n in statuses.items() if 200 <= s < 300)
    return {
        "total_requests": total,
        "requests": len(ms),
        "errors": len(ms) - ok,
        "statuses": {str(k): v for k, v in statuses.items()},
        "seconds": args.seconds,
        "rate": len(ms) / args.seconds,
        "p50_ms": pct(ms, 0.50),
        "p90_ms": pct(ms, 0.90),
        "p99_ms": pct(ms, 0.99),
        "max_ms": ms[-1] if ms else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--body-file", required=True)
    ap.add_argument("--content-type", default="application/json")
    ap.add_argument("--accept", default="", help="an Accept header (none when empty)")
    ap.add_argument("--header", action="append", default=[], help="'Name: value', repeatable")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds not counted")
    ap.add_argument("--rate", type=float, default=0.0, help="0: closed loop (max rate)")
    args = ap.parse_args()
    if uvloop is not None:
        uvloop.install()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
