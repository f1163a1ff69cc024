"""``onlinepredict replay``: stream a data set into a model, wait until it is learned, report.

The stream goes through Kafka (the events topic, keyed by model id) or through the API's
events endpoint. Every event gets a fresh uuid4 id, so the workers apply each exactly once.
After the last send, the command polls the model's processed-event counter (applied +
duplicate + rejected, from ``GET /v1/models/{id}``) until it has grown by the number of
events sent, then prints the model's figures (``/v1/models/{id}/metrics``, `Client.model_metrics`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from clients._cliutil import (
    ClientOptions,
    UserError,
    _finite,
    _fmt,
    _print_json,
    client_command,
    err,
    handle_errors,
    out,
    parse_param,
)
from clients.errors import UnavailableError
from clients.http import Client

if TYPE_CHECKING:  # the data sets pull in numpy: imported only when a replay runs
    from clients.datasets import Dataset, Item

POLL_S = 0.25  # how often the applied counter is polled while waiting for the workers


class RateColumn(ProgressColumn):
    """Events per second, from rich's own speed estimate."""

    def render(self, task: Any) -> Text:
        speed = task.finished_speed or task.speed
        return Text(
            "-- ev/s" if speed is None else f"{speed:,.0f} ev/s", style="cyan", no_wrap=True
        )


def _progress(transient: bool = False) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        RateColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(compact=True),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
    )


def chunked(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def chunk_size(batch: int, rate: float | None) -> int:
    """Events per send: about 20 sends a second when rate-limited, ``batch`` otherwise."""
    if rate:
        return max(1, min(batch, int(rate / 20)))
    return batch


class _Pacer:
    """Holds the stream to ``rate`` events/s on average (None: no limit)."""

    def __init__(self, rate: float | None) -> None:
        self.rate, self.t0 = rate, time.monotonic()

    def delay(self, sent: int) -> float:
        if not self.rate:
            return 0.0
        return max(0.0, self.t0 + sent / self.rate - time.monotonic())


async def _send_kafka(
    chunks: Iterable[list[Item]],
    model: str,
    bootstrap: str | None,
    topic: str | None,
    rate: float | None,
    on_sent: Any,
    wire_format: str = "frame",
) -> int:
    from clients.producer import EventProducer

    sent, pacer = 0, _Pacer(rate)
    async with EventProducer(bootstrap, topic=topic) as producer:
        for chunk in chunks:
            await asyncio.sleep(pacer.delay(sent))
            await producer.send_many(
                model, [x for x, _ in chunk], [y for _, y in chunk], format=wire_format
            )
            sent += len(chunk)
            on_sent(len(chunk))
    return sent


def _send_http(
    api: Client, chunks: Iterable[list[Item]], model: str, rate: float | None, on_sent: Any
) -> int:
    sent, pacer = 0, _Pacer(rate)
    for chunk in chunks:
        time.sleep(pacer.delay(sent))
        api.send_events(model, [x for x, _ in chunk], [y for _, y in chunk])
        sent += len(chunk)
        on_sent(len(chunk))
    return sent


def processed_events(api: Client, model: str) -> int:
    """Events the workers have taken into the model's checkpointed state."""
    return api.processed(model)


def wait_applied(
    api: Client, model: str, target: int, timeout: float, on_progress: Any = None
) -> int:
    """Poll until the model has processed ``target`` events; UserError after ``timeout`` s."""
    try:
        return api.wait_processed(model, target, timeout, POLL_S, on_progress)
    except UnavailableError as exc:
        raise UserError(exc.message) from exc


def ensure_model(
    api: Client, model: str, ds: Dataset, kind: str | None, params: dict[str, Any]
) -> tuple[Any, bool]:
    """The model's info, creating it (``kind``, else the data set's default) when missing."""
    if api.model_exists(model):
        info = api.get_model(model)
        if info.dim and info.dim != ds.dim:
            raise UserError(
                f"model {model!r} has dim {info.dim}, data set {ds.name!r} has {ds.dim}"
            )
        if kind and info.kind and kind != info.kind:
            err.print(f"note: model {model!r} exists with kind {info.kind!r}; --kind ignored")
        return info, False
    kind = kind or ds.kind
    if not kind:
        raise UserError(f"model {model!r} does not exist: pass --kind to create it")
    features = list(ds.feature_names) if ds.feature_names else None
    info = api.create_model(model, kind, ds.dim, {**ds.params, **params}, features=features)
    return info, True


@dataclass
class _Options:
    via: str
    rate: float | None
    limit: int | None
    batch: int


@handle_errors
@client_command
def replay(
    dataset: Annotated[str, typer.Argument(help="Built-in data set name, or a FILE.csv.")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model id to stream into.")],
    kind: Annotated[
        str | None, typer.Option("--kind", "-k", help="Create the model with this kind if missing.")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="Learner KEY=VALUE when creating.")
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Data set option KEY=VALUE.")
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="CSV: the label column (default y/target/last).")
    ] = None,
    via: Annotated[str, typer.Option("--via", help="kafka or http.")] = "kafka",
    wire_format: Annotated[
        str,
        typer.Option(
            "--format", help="With --via kafka: 'frame' (binary, one record per send) or 'json'."
        ),
    ] = "frame",
    rate: Annotated[
        float | None, typer.Option("--rate", min=0.0, help="Events per second (default: max).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Stop after N.")] = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="Events per send.")
    ] = 500,
    bootstrap: Annotated[
        str | None,
        typer.Option("--bootstrap", envvar="ONLINEPREDICT_KAFKA_BOOTSTRAP", help="Kafka brokers."),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option("--topic", envvar="ONLINEPREDICT_EVENTS_TOPIC", help="Events topic."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait until the workers applied every event.")
    ] = True,
    wait_timeout: Annotated[
        float, typer.Option("--wait-timeout", min=0.0, help="Seconds to wait for the workers.")
    ] = 600.0,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Stream a data set into a model, wait until the workers learned it, print its metrics."""
    if via not in ("kafka", "http"):
        raise typer.BadParameter("--via must be 'kafka' or 'http'")
    if wire_format not in ("frame", "json"):
        raise typer.BadParameter("--format must be 'frame' or 'json'")
    from clients.datasets import load_dataset

    ds = load_dataset(dataset, target=target)
    options = dict(parse_param(o) for o in option or [])
    params = dict(parse_param(p) for p in param or [])
    stream = ds.stream(limit=limit, **options)
    total = ds.length(limit) if not options else limit  # options may change the length
    plan = _Options(via, rate or None, limit, chunk_size(batch, rate or None))

    with opts.client() as api:
        info, created = ensure_model(api, model, ds, kind, params)
        if created:
            err.print(f"created model {model!r} ({info.kind}, dim {ds.dim})")
        baseline = processed_events(api, model)
        with _progress() as progress:
            task = progress.add_task(f"{ds.name} -> {model}", total=total)

            def on_sent(n: int) -> None:
                progress.advance(task, n)

            # the first chunk loads the data set (river/sklearn/skfolio): not part of the rate
            chunks = chunked(stream, plan.batch)
            first = next(chunks, None)
            chunks = itertools.chain([first] if first else [], chunks)
            t0 = time.monotonic()
            if via == "kafka":
                sent = asyncio.run(
                    _send_kafka(chunks, model, bootstrap, topic, plan.rate, on_sent, wire_format)
                )
            else:
                sent = _send_http(api, chunks, model, plan.rate, on_sent)
            progress.update(task, total=sent, completed=sent)
        send_s = time.monotonic() - t0

        if wait and sent:
            with _progress(transient=True) as progress:
                task = progress.add_task("workers applying", total=sent)

                def on_applied(done: int) -> None:
                    progress.update(task, completed=max(0, min(sent, done - baseline)))

                wait_applied(api, model, baseline + sent, wait_timeout, on_applied)
        total_s = time.monotonic() - t0
        summary = _summary(api, model)

    result = {
        "model": model,
        "dataset": ds.name,
        "via": via,
        "sent": sent,
        "send_seconds": round(send_s, 3),
        "seconds": round(total_s, 3),
        "events_per_second": round(sent / send_s, 1) if send_s > 0 else None,
        "waited": wait,
        **summary,
    }
    if opts.as_json:
        _print_json(_finite(result))
        return
    out.print(f"[bold]{model}[/bold] after replaying {ds.name}:")
    table = Table(show_header=False)
    for key, value in result.items():
        table.add_row(f"[bold]{key}[/bold]", _fmt(value))
    out.print(table)


def _summary(api: Client, model: str) -> dict[str, Any]:
    summary = api.model_metrics(model)
    if summary.get("events") is None:  # a model the feed does not list yet: use the API's
        summary["events"] = api.get_model(model).applied
    return summary
