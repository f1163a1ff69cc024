"""Bits every example shares: command-line flags, the model id and client, creating the
model once, and sending a labelled stream to learn."""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Sequence
from typing import Any

from clients import Client


def parser(description: str, default_model: str, default_limit: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default=default_model, help="model id (created if missing)")
    p.add_argument("--limit", type=int, default=default_limit, help="events to stream")
    p.add_argument("--fresh", action="store_true", help="use a new, unique model id")
    p.add_argument(
        "--api-url",
        default=os.environ.get("ONLINEPREDICT_API_URL", "http://127.0.0.1:8000"),
        help="API address (env ONLINEPREDICT_API_URL)",
    )
    return p


def model_id(args: argparse.Namespace) -> str:
    return f"{args.model}-{uuid.uuid4().hex[:6]}" if args.fresh else args.model


def start(
    doc: str, default_model: str, default_limit: int
) -> tuple[argparse.Namespace, str, Client]:
    """The example's flags (its docstring's first line describes it), model id and client."""
    args = parser(doc.splitlines()[0], default_model, default_limit).parse_args()
    return args, model_id(args), Client(args.api_url)


def ensure_model(
    api: Client,
    model: str,
    kind: str,
    dim: int,
    params: dict[str, Any] | None = None,
    *,
    features: list[str] | None = None,
) -> None:
    """Create the model unless it exists: an example run again goes on learning it."""
    if not api.model_exists(model):
        api.create_model(model, kind, dim, params, features=features)


def learn(api: Client, model: str, rounds: Sequence[tuple[Any, Any]]) -> int:
    """Send labelled ``(x, y)`` rounds as events over HTTP and wait until the workers took
    them all into the model's checkpointed state; returns the model's processed count."""
    done = api.processed(model) + len(rounds)
    api.send_events(model, [x for x, _ in rounds], [y for _, y in rounds])
    api.wait_processed(model, done)
    return done
