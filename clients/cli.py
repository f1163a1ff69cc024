"""The client commands of the ``onlinepredict`` CLI: models, predict, replay, watch, checkpoint.

``service/cli.py`` mounts them on the root command with `register`; ``python -m clients.cli``
runs them alone. The API is found at ``ONLINEPREDICT_API_URL`` (default
``http://127.0.0.1:8000``), the broker at ``ONLINEPREDICT_KAFKA_BOOTSTRAP``.

Exit codes: 0 success; 1 the server refused the request or it could not be carried out
(the server's message on stderr); 2 bad usage.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from clients._cliutil import (
    ClientOptions,
    UserError,
    _finite,
    _fmt,
    _print_json,
    client_command,
    handle_errors,
    out,
    parse_param,
)
from clients._vectors import as_vector

# --- models ----------------------------------------------------------------------------------
models_app = typer.Typer(help="Create, list, show and delete models.", no_args_is_help=True)


def load_spec_file(path: str) -> dict[str, Any]:
    """A model spec from a JSON or YAML file (``-`` reads stdin)."""
    import yaml

    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    try:
        spec = yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid JSON or YAML: {exc}") from exc
    if not isinstance(spec, dict):
        raise UserError(f"{path}: a spec must be a mapping with kind, dim and params")
    return spec


@models_app.command("create")
@handle_errors
@client_command
def models_create(
    model: Annotated[str | None, typer.Argument(help="Model id (or 'id' in the file).")] = None,
    kind: Annotated[str | None, typer.Option("--kind", "-k", help="Learner kind.")] = None,
    dim: Annotated[int | None, typer.Option("--dim", "-d", min=1, help="Dimension of x.")] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="Hyperparameter KEY=VALUE.")
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="Spec as JSON/YAML file ('-': stdin).")
    ] = None,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Create a model from flags or a JSON/YAML spec file (flags override the file)."""
    spec = load_spec_file(file) if file else {}
    params = dict(spec.get("params") or {})
    params.update(parse_param(p) for p in param or [])
    model = model or spec.get("id")
    kind = kind or spec.get("kind")
    dim = dim or spec.get("dim")
    missing = [n for n, v in (("model id", model), ("--kind", kind), ("--dim", dim)) if not v]
    if missing:
        raise typer.BadParameter(f"missing {', '.join(missing)} (flags or --file)")
    with opts.client() as api:
        pre = spec.get("preprocess")
        if "preprocess" in spec and pre is None:
            pre = {}  # the file's null is none; the SDK's None means the kind's default
        info = api.create_model(
            str(model),
            str(kind),
            int(dim or 0),
            params,
            features=spec.get("features"),
            assets=spec.get("assets"),
            preprocess=pre,
        )
    if opts.as_json:
        _print_json(info)
    else:
        out.print(f"created model [bold]{info.id}[/bold] ({info.kind}, dim {info.dim})")


@models_app.command("list")
@handle_errors
@client_command
def models_list(
    opts: ClientOptions = ClientOptions(),
) -> None:
    """List every model."""
    with opts.client() as api:
        models = api.list_models()
    if opts.as_json:
        _print_json(list(models))
        return
    table = Table()
    # the id whole, never cut with an ellipsis at 80 columns (issue 34): on a terminal too
    # narrow for it, it folds onto the next line; into a pipe, a line per model as wide
    # as it needs (a grep or a script sees every id whole)
    table.add_column("id", overflow="fold")
    for header in ("kind", "dim", "task", "version", "applied", "last update"):
        table.add_column(header)
    for m in models:
        when = _when(m.updated_at)
        table.add_row(
            m.id, m.kind, str(m.dim), _fmt(m.task), _fmt(m.version), _fmt(m.applied), when
        )
    if out.is_terminal:
        out.print(table)
        return
    wide = Measurement.get(out, out.options.update(width=100_000), table).maximum
    Console(file=out.file, width=max(out.width, wide), highlight=False).print(table)


@models_app.command("show")
@handle_errors
@client_command
def models_show(
    model: Annotated[str, typer.Argument(help="Model id.")],
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Show a model's spec, serving version, event counts and headline metrics."""
    with opts.client() as api:
        info = api.get_model(model)
        summary = _finite(api.model_metrics(model))
    if opts.as_json:
        _print_json({"model": info, "metrics": summary})
        return
    table = Table(show_header=False, box=None)
    for key, value in (
        ("id", info.id),
        ("kind", info.kind),
        ("dim", info.dim),
        ("task", info.task),
        ("params", json.dumps(info.params)),
        ("partition", info.partition),
        ("version", info.version),
        ("applied", info.applied),
        ("last update", _when(info.updated_at)),
        ("duplicate", info.duplicate),
        ("rejected", info.rejected),
        *([("HALTED", info.halted)] if info.halted else []),
        # the figures without the counts already shown above (events = applied, ...)
        *((k, v) for k, v in summary.items() if k not in SHOWN_AS_COUNTS),
    ):
        table.add_row(f"[bold]{key}[/bold]", _fmt(value))
    out.print(table)


SHOWN_AS_COUNTS = ("events", "duplicates", "rejected")  # `models show` prints them as counts


def _when(ts: float | None) -> str:
    """Local time of a checkpoint, '-' before the first."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _confirm(yes: bool, question: str) -> None:
    """Ask on a terminal; without one (a script, a pipe) refuse unless ``--yes`` was given,
    so that nothing destructive runs on an answer nobody typed."""
    if yes:
        return
    if not sys.stdin.isatty():
        typer.echo(f"{question} Refusing without --yes: stdin is not a terminal.", err=True)
        raise typer.Exit(2)
    typer.confirm(question, abort=True)


@models_app.command("delete")
@handle_errors
@client_command
def models_delete(
    model: Annotated[str, typer.Argument(help="Model id.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Delete a model and its checkpoints."""
    _confirm(yes, f"Delete model {model!r} and its checkpoints?")
    with opts.client() as api:
        api.delete_model(model)
    if opts.as_json:
        _print_json({"deleted": model})
    else:
        out.print(f"deleted model [bold]{model}[/bold]")


@models_app.command("deadletters")
@handle_errors
@client_command
def models_deadletters(
    model: Annotated[str, typer.Argument(help="Model id.")],
    limit: Annotated[int, typer.Option(help="At most this many (1 to 1000).")] = 20,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """The events the model refused, newest first, with why (its dead letters)."""
    with opts.client() as api:
        letters = api.deadletters(model, limit=limit)
    if opts.as_json:
        _print_json(letters)
        return
    if not letters:
        out.print(f"model [bold]{model}[/bold] refused no event its workers listed")
        return
    table = Table("time", "event id", "partition", "offset", "reason")
    for d in letters:
        at = d["offset"] if d.get("frame_row") is None else f"{d['offset']} row {d['frame_row']}"
        row = (_when(d.get("time")), d.get("event_id") or "-", d["partition"], at, d["reason"])
        table.add_row(*map(str, row))
    out.print(table)


# --- predict ---------------------------------------------------------------------------------
def parse_vector(text: str) -> list[float] | dict[str, float]:
    """A vector from a line: a JSON array, numbers separated by commas and/or spaces, or a
    JSON object of named values (a model with ``features``; missing names are 0).

    Examples
    --------
    >>> parse_vector("[1, 2.5]"), parse_vector("1, -2 3e-1")
    ([1.0, 2.5], [1.0, -2.0, 0.3])
    >>> parse_vector('{"temp": 2}')
    {'temp': 2.0}
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            named = as_vector(json.loads(text))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise UserError(f"not a JSON object of named numbers: {text[:60]!r}") from exc
        if not isinstance(named, dict):
            raise UserError(f"not a JSON object of named numbers: {text[:60]!r}")
        return named
    if text.startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"not a JSON array: {text[:60]!r}") from exc
    else:
        values = [t for t in text.replace(",", " ").split() if t]
    try:
        vector = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise UserError(f"not a vector of numbers: {text[:60]!r}") from exc
    if not vector:
        raise UserError("empty vector")
    return vector


@handle_errors
@client_command
def predict(
    model: Annotated[str, typer.Argument(help="Model id.")],
    values: Annotated[
        list[str] | None,
        typer.Argument(
            help="Vector components, or a JSON object of named values (a model with"
            " features); none: read one vector per line from stdin."
        ),
    ] = None,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Predict for a vector given as arguments, or for each vector (line) on stdin."""
    if values:
        rows = [parse_vector(" ".join(values))]
    else:
        if sys.stdin.isatty():
            raise typer.BadParameter("give the vector as arguments or on stdin")
        rows = [parse_vector(line) for line in sys.stdin if line.strip()]
        if not rows:
            raise UserError("no vector on stdin")
    with opts.client() as api:
        if len(rows) == 1:
            preds = [api.predict(model, rows[0])]
            version = preds[0].model_version
        else:
            resp = api.predict_batch(model, rows)
            preds, version = resp.predictions, resp.model_version
    if opts.as_json:
        _print_json(
            {
                "predictions": [
                    {
                        "value": p.value,
                        "prediction_id": p.prediction_id,
                        "scores": p.scores,
                        **({"probabilities": p.probabilities} if p.probabilities else {}),
                    }
                    for p in preds
                ],
                "model_version": version,
            }
        )
        return
    for p in preds:  # plain tab-separated lines: easy to cut/awk
        sys.stdout.write(f"{_fmt(p.value)}\t{p.prediction_id or ''}\n")


# --- checkpoint ------------------------------------------------------------------------------
checkpoint_app = typer.Typer(help="List a model's kept checkpoints; roll back to one.")


@checkpoint_app.command("list")
@handle_errors
@client_command
def checkpoint_list(
    model: Annotated[str, typer.Argument(help="Model id.")],
    opts: ClientOptions = ClientOptions(),
) -> None:
    """The model's last K checkpoints (K = ONLINEPREDICT_HISTORY_KEEP on the workers)."""
    with opts.client() as api:
        checkpoints = api.checkpoints(model)
    if opts.as_json:
        _print_json(checkpoints)
        return
    table = Table("version", "partition", "offset", "applied", "time")
    for c in checkpoints:
        when = _when(c.ts)
        table.add_row(str(c.version), _fmt(c.partition), _fmt(c.offset), _fmt(c.applied), when)
    out.print(table)


@checkpoint_app.command("rollback")
@handle_errors
@client_command
def checkpoint_rollback(
    model: Annotated[str, typer.Argument(help="Model id.")],
    version: Annotated[int, typer.Argument(help="Checkpoint version to restore.", min=0)],
    discard_after: Annotated[
        bool,
        typer.Option(
            "--discard-after",
            help="Never learn the events between the version and this rollback (discarded,"
            " counted in the model's status); without it they are re-learned once.",
        ),
    ] = False,
    skip: Annotated[
        list[str] | None,
        typer.Option("--skip", help="An event id never to learn (repeat for more)."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    opts: ClientOptions = ClientOptions(),
) -> None:
    """Restore an older checkpoint and its offset; the worker re-learns from there, or with
    --discard-after drops everything after it. --skip ID leaves out named events."""
    what = " discarding the events after it" if discard_after else ""
    _confirm(yes, f"Roll model {model!r} back to version {version}{what}?")
    with opts.client() as api:
        result = api.rollback(model, version, discard_after=discard_after, skip_ids=skip or ())
    if opts.as_json:
        _print_json(result or {"model": model, "version": version})
    else:
        out.print(f"model [bold]{model}[/bold] rolled back to version {version}{what}")


# --- replay and watch live in their own modules (they are bigger) ----------------------------
def _replay_command() -> Callable[..., Any]:
    from clients.replay import replay

    return replay


def _watch_command() -> Callable[..., Any]:
    from clients.watch import watch

    return watch


def register(root: typer.Typer) -> None:
    """Add the client commands (models, predict, replay, watch, checkpoint) to ``root``."""
    root.add_typer(models_app, name="models")
    root.add_typer(checkpoint_app, name="checkpoint")
    root.command(
        "predict",
        context_settings={"ignore_unknown_options": True},  # negative numbers
    )(predict)
    root.command("replay")(_replay_command())
    root.command("watch")(_watch_command())


app = typer.Typer(
    name="onlinepredict",
    help="onlinepredict client commands: models, predict, replay, watch, checkpoint.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register(app)

__all__ = ["app", "register"]

if __name__ == "__main__":
    app()
