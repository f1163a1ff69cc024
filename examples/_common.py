"""Bits every example shares: command-line flags and a unique model id."""

from __future__ import annotations

import argparse
import os
import uuid


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
