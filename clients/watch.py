"""``onlinepredict watch MODEL``: a live terminal view of a model's figures from ``/metrics``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table

from clients import metrics as _metrics
from clients._cliutil import (
    DEFAULT_URL,
    ApiKey,
    ApiUrl,
    JsonOut,
    Timeout,
    _client,
    _finite,
    _fmt,
    _print_json,
    handle_errors,
    out,
)
from clients.http import Client

HEADLINE = ("events", "cumulative_loss", "cumulative_regret", "rmse", "mistakes", "error_rate")


def snapshot(api: Client, model: str) -> dict[str, Any]:
    """The model's info and every sample of it on ``/metrics``."""
    info = api.get_model(model)  # 404 (exit 1) for an unknown model
    samples = _metrics.model_samples(api.metrics_text(), model)
    return {
        "model": model,
        "kind": info.kind,
        "version": info.version,
        "time": time.time(),
        "summary": _finite(_metrics.summarize(samples)),
        "metrics": _finite(_metrics.scalar_gauges(samples)),
    }


def render(snap: dict[str, Any], rate: float | None) -> Group:
    head = Table(
        title=f"{snap['model']} ({snap['kind']}), version {_fmt(snap['version'])}",
        show_header=False,
    )
    head.add_row("[bold]events/s[/bold]", _fmt(rate))
    for key in HEADLINE:
        if key in snap["summary"]:
            head.add_row(f"[bold]{key}[/bold]", _fmt(snap["summary"][key]))
    detail = Table("metric", "value", title="all metrics of the model (diagnostics included)")
    for name, value in sorted(snap["metrics"].items()):
        detail.add_row(name, _fmt(value))
    if not snap["metrics"]:
        detail.add_row("(no samples yet for this model on /metrics)", "")
    return Group(head, detail)


@handle_errors
def watch(
    model: Annotated[str, typer.Argument(help="Model id.")],
    interval: Annotated[
        float, typer.Option("--interval", "-i", min=0.1, help="Seconds between refreshes.")
    ] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    api_url: ApiUrl = DEFAULT_URL,
    api_key: ApiKey = None,
    timeout: Timeout = 10.0,
    as_json: JsonOut = False,
) -> None:
    """Live view of loss, regret, tracking error and the learner's diagnostics (Ctrl-C quits).

    With --json (or --once) one snapshot is printed and the command exits.
    """
    with _client(api_url, api_key, timeout) as api:
        snap = snapshot(api, model)
        if as_json:
            _print_json(snap)
            return
        if once:
            out.print(render(snap, None))
            return
        last = snap
        try:
            with Live(render(snap, None), console=out, refresh_per_second=4) as live:
                while True:
                    time.sleep(interval)
                    snap = snapshot(api, model)
                    rate = _rate(last, snap)
                    live.update(render(snap, rate))
                    last = snap
        except KeyboardInterrupt:
            pass


def _rate(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    a, b = before["summary"].get("events"), after["summary"].get("events")
    dt = after["time"] - before["time"]
    if a is None or b is None or dt <= 0:
        return None
    return (b - a) / dt
