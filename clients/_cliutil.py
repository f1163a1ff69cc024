"""Shared pieces of the client commands: options, output, error handling, parsing."""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from clients.errors import OnlinePredictError

F = TypeVar("F", bound=Callable[..., Any])

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

# --- shared options --------------------------------------------------------------------------
ApiUrl = Annotated[
    str,
    typer.Option(
        "--api-url", envvar="ONLINEPREDICT_API_URL", help="API address.", show_default=True
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ONLINEPREDICT_API_KEY", help="Sent as X-API-Key."),
]
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout", min=0.1, help="Seconds per HTTP request (above the API's 15 s send timeout)."
    ),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
DEFAULT_URL = "http://127.0.0.1:8000"


class UserError(Exception):
    """A request that cannot be carried out; printed on stderr, exit code 1."""


def _client(api_url: str, api_key: str | None, timeout: float = 20.0) -> Any:
    from clients.http import Client

    return Client(api_url, api_key=api_key or "", timeout=timeout)


def handle_errors(fn: F) -> F:
    """Turn SDK and user errors into a message on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OnlinePredictError as exc:
            where = f" (HTTP {exc.status})" if exc.status else ""
            err.print(f"[red]Error{where}:[/red] {exc.message}", markup=True, soft_wrap=True)
        except (UserError, ValueError, KeyError, FileNotFoundError, ImportError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            err.print(f"[red]Error:[/red] {message}", markup=True, soft_wrap=True)
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        raise typer.Exit(1)

    return wrapper  # type: ignore[return-value]


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=_jsonable, allow_nan=False) + "\n")
    sys.stdout.flush()


def _jsonable(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(data: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: report them as null."""
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in data.items()
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def parse_param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as YAML (numbers, booleans, lists, null, strings).

    Examples
    --------
    >>> parse_param("C=0.5"), parse_param("adaptive=false"), parse_param("side=log_return")
    (('C', 0.5), ('adaptive', False), ('side', 'log_return'))
    """
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed
