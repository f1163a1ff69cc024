"""``onlinepredict watch MODEL``: a live terminal view of a model's figures, read from the
API's JSON route ``/v1/models/{id}/metrics`` (`clients.figures`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from clients import figures as _figures
from clients._cliutil import (
    ClientOptions,
    _finite,
    _fmt,
    _print_json,
    client_command,
    handle_errors,
    out,
)
from clients.http import Client

HEADLINE = (
    "events",
    "cumulative_loss",
    "cumulative_regret",
    "rmse",
    "tracking_error",
    "mistakes",
    "error_rate",
    "excess_cumulative_return",
    "prevalence_estimate",
    "true_prevalence",
    "quantification_kld",
)
TOP_WEIGHTS = 8  # ensemble experts shown, heaviest first
BAR = 30  # characters of a full weight bar


def snapshot(api: Client, model: str) -> dict[str, Any]:
    """The model's info and its live figures (`Client.model_snapshot`)."""
    info = api.get_model(model)  # 404 (exit 1) for an unknown model
    entry = api.model_snapshot(model)
    return {
        "model": model,
        "kind": info.kind,
        "version": info.version,
        "time": time.time(),
        "summary": _finite(_figures.summarize(entry)),
        "metrics": _finite(_figures.flat_figures(entry)),
        "diagnostics": _finite(dict(entry["diagnostics"])),
        "ensemble_weights": _finite(_figures.ensemble_weights(entry)),
    }


def _indexed(name: str) -> tuple[str, int] | None:
    """``gamma_12`` -> ("gamma", 12): per-expert diagnostics, shown with the weights."""
    prefix, _, index = name.rpartition("_")
    return (prefix, int(index)) if prefix and index.isdigit() else None


def render(snap: dict[str, Any], rate: float | None) -> Group:
    """Headline figures, the learner's diagnostics and the ensemble's heaviest experts."""
    title = Text.from_markup(
        f"[bold]{snap['model']}[/bold] ({snap['kind']}), checkpoint version {_fmt(snap['version'])}"
    )
    head = Table(show_header=False)
    head.add_row("[bold]events/s[/bold]", _fmt(rate))
    for key in HEADLINE:
        if snap["summary"].get(key) is not None:
            head.add_row(f"[bold]{key}[/bold]", _fmt(snap["summary"][key]))
    parts: list[Any] = [title, head]
    per_expert: dict[str, dict[int, float]] = {}
    diag = Table("diagnostic", "value", title="learner diagnostics", title_justify="left")
    for name, value in sorted(snap["diagnostics"].items()):
        if (split := _indexed(name)) is not None:
            per_expert.setdefault(split[0], {})[split[1]] = value
        else:
            diag.add_row(name, _fmt(value))
    if diag.row_count:
        parts.append(diag)
    weights = snap["ensemble_weights"]
    if weights:
        extra = sorted(k for k in per_expert if k != "weight")
        chart = Table(
            "expert", *extra, "weight", "",
            title=f"ensemble weights (top {min(TOP_WEIGHTS, len(weights))} of {len(weights)})",
            title_justify="left",
        )  # fmt: skip
        for expert, w in sorted(weights.items(), key=lambda kv: -(kv[1] or 0))[:TOP_WEIGHTS]:
            i = int(expert) if expert.isdigit() else -1
            cols = [_fmt(per_expert[k].get(i)) for k in extra]
            bar = "[cyan]" + "\u2588" * round((w or 0) * BAR) + "[/cyan]"
            chart.add_row(expert, *cols, _fmt(w), bar)
        parts.append(chart)
    if not snap["metrics"]:
        parts.append("(no figures yet for this model: no worker has checkpointed it)")
    return Group(*parts)


@handle_errors
@client_command
def watch(
    model: Annotated[str, typer.Argument(help="Model id.")],
    interval: Annotated[
        float, typer.Option("--interval", "-i", min=0.1, help="Seconds between refreshes.")
    ] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Live view of loss, regret, tracking error and the learner's diagnostics (Ctrl-C quits).

    With --json (or --once) one snapshot is printed and the command exits.
    """
    with opts.client() as api:
        snap = snapshot(api, model)
        if opts.as_json:
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
