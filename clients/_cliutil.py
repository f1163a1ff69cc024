"""Shared pieces of the client commands: options, output, error handling, parsing."""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from clients.errors import OnlinePredictError

if TYPE_CHECKING:
    from clients.http import Client

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


@dataclass(frozen=True)
class ClientOptions:
    """The options every client command takes: where the API is, its key, the time per
    request, JSON output. Declared once, by `client_command`."""

    api_url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = 20.0
    as_json: bool = False

    def client(self) -> Client:
        from clients.http import Client  # not at import: `--help` stays fast

        return Client(self.api_url, api_key=self.api_key or "", timeout=self.timeout)


_SHARED = tuple(
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
    for name, default, option in (
        ("api_url", DEFAULT_URL, ApiUrl),
        ("api_key", None, ApiKey),
        ("timeout", 20.0, Timeout),
        ("as_json", False, JsonOut),
    )
)


def client_command(fn: F) -> F:
    """Give a command the shared options ``--api-url``, ``--api-key``, ``--timeout`` and
    ``--json``, declared here once: the command takes ``opts: ClientOptions``, and typer,
    which reads the command's signature, sees the four options in its place.

    The options stay on each command (``onlinepredict models list --api-url URL``), as
    before: an app callback would move them before the command name, and the commands
    ``predict``, ``replay`` and ``watch`` hang on the root app of ``service/cli.py``.
    """
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "opts"]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        shared = {p.name: kwargs.pop(p.name, p.default) for p in _SHARED}
        return fn(*args, opts=ClientOptions(**shared), **kwargs)

    command.__signature__ = signature.replace(parameters=[*own, *_SHARED])  # type: ignore[attr-defined]
    return command  # type: ignore[return-value]


def handle_errors(fn: F) -> F:
    """Turn SDK and user errors into a message on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OnlinePredictError as exc:
            where = f" (HTTP {exc.status})" if exc.status else ""
            hint = _AUTH_HINTS.get(exc.status or 0, "")
            err.print(f"[red]Error{where}:[/red] {exc.message}{hint}", markup=True, soft_wrap=True)
        except (UserError, ValueError, KeyError, FileNotFoundError, ImportError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            err.print(f"[red]Error:[/red] {message}", markup=True, soft_wrap=True)
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        raise typer.Exit(1)

    return wrapper  # type: ignore[return-value]


_AUTH_HINTS = {
    401: "; set ONLINEPREDICT_API_KEY or pass --api-key",
    403: "; use a key with that scope (docs/security.md, 'Keys and scopes')",
}


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
