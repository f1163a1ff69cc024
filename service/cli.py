"""The ``onlinepredict`` command: ``up``, ``api`` and ``worker``, plus the client commands
(``models``, ``predict``, ``replay``, ``watch``, ``checkpoint``) from ``clients/cli.py``.

Every setting comes from ``ONLINEPREDICT_*`` environment variables (``deploy/.env.example``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Annotated

from service.worker import early_stop

# `onlinepredict worker` (the image, compose, k8s and `up` run this): a SIGTERM during the
# imports below is recorded, not fatal; the worker acts on it once it runs.
if sys.argv[1:2] == ["worker"]:
    early_stop.hold()

# Before numpy loads: one BLAS thread for the worker and the API (many small matrix steps;
# BLAS threads fighting over shared cores made d x d learners 2-12x slower). An explicit
# OPENBLAS_NUM_THREADS wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer  # noqa: E402

from service.config import Settings  # noqa: E402

logger = logging.getLogger(__name__)

app = typer.Typer(
    name="onlinepredict",
    help="Streaming online prediction: Kafka workers, Redis checkpoints, HTTP API.",
    no_args_is_help=True,
)


# client libraries whose INFO lines are chatter to an operator (aiokafka: "Updating
# subscribed topics" every 2 s per worker); ONLINEPREDICT_LOG_VERBOSE=true keeps them
CHATTY_LOGGERS = ("aiokafka", "kafka")


def _verbose() -> bool:
    return os.environ.get("ONLINEPREDICT_LOG_VERBOSE", "").strip().lower() in ("1", "true", "yes")


def _setup_logging(level: str | None = None) -> None:
    logging.basicConfig(
        level=(level or os.environ.get("ONLINEPREDICT_LOG_LEVEL", "INFO")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not _verbose():
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def _settings() -> Settings:
    try:
        return Settings()
    except Exception as exc:  # pydantic ValidationError: show it without a traceback
        typer.echo(f"invalid configuration: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def worker(
    worker_id: Annotated[
        str | None,
        typer.Option(help="Worker id (default: host-pid).", envvar="ONLINEPREDICT_WORKER_ID"),
    ] = None,
    drain: Annotated[
        bool,
        typer.Option(
            help="On SIGTERM/SIGINT first learn to the end of the log (up to "
            "ONLINEPREDICT_DRAIN_TIMEOUT_S; a second signal cuts it short), then stop."
        ),
    ] = False,
) -> None:
    """Run one worker: consume events, learn, checkpoint; stops cleanly on SIGTERM/SIGINT."""
    _setup_logging()
    from service.worker.main import main as worker_main

    worker_main(_settings(), worker_id, drain=drain)


@app.command()
def api() -> None:
    """Run the HTTP API (uvicorn) on ONLINEPREDICT_API_HOST:ONLINEPREDICT_API_PORT."""
    _setup_logging()
    settings = _settings()
    try:
        from service.api import app as api_app
    except ImportError as exc:
        typer.echo(f"the HTTP API is not available in this installation: {exc}", err=True)
        raise typer.Exit(1) from None
    serve = getattr(api_app, "serve", None)
    if serve is not None:
        serve(settings)
        return
    import uvicorn

    uvicorn.run(api_app.create_app(settings), host=settings.api_host, port=settings.api_port)


@app.command()
def up(
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 2,
    demo: Annotated[
        bool, typer.Option(help="Stream the S&P 500 index-tracking demo and show it live.")
    ] = False,
    rate: Annotated[float, typer.Option(min=0.1, help="Demo events per second.")] = 25.0,
    log_dir: Annotated[
        str | None, typer.Option(help="Write child process logs here (default: inherit).")
    ] = None,
    observe: Annotated[
        bool,
        typer.Option(
            help="Also start Prometheus (ONLINEPREDICT_PROMETHEUS_PORT) scraping the API and "
            "every worker, and Grafana where grafana-server is installed."
        ),
    ] = False,
    redis_cluster: Annotated[
        bool,
        typer.Option(
            help="Run on a Redis Cluster: the one at ONLINEPREDICT_REDIS_URL when "
            "ONLINEPREDICT_REDIS_MODE=cluster, else 3 masters + 3 replicas started here "
            "(in memory: their data is gone when up stops)."
        ),
    ] = False,
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="Keep the broker's log on disk (tansu's s3 engine on a local S3 server, "
            "under the data directory beside Redis's append-only file): what was answered "
            "202 survives a SIGKILL of every process. Slower to consume (docs/reliability.md).",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Also print every HTTP request and the Kafka client's INFO logs "
            "(ONLINEPREDICT_LOG_VERBOSE=true in every process).",
        ),
    ] = False,
) -> None:
    """Start the broker and Redis if nothing answers at their addresses, create the topics,
    run the API and N workers (restarting any that dies); Ctrl-C stops everything cleanly:
    the API first, then the workers learn to the end of the log, then the broker and Redis."""
    from pathlib import Path

    from service.embedded.up import (
        Progress,
        Stack,
        StackError,
        install_signal_handlers,
        redis_address,
    )

    if verbose:  # before the logging setup, and inherited by every child
        os.environ["ONLINEPREDICT_LOG_VERBOSE"] = "true"
    _setup_logging()
    settings = _settings()
    stack = Stack(
        settings,
        workers=workers,
        log_dir=Path(log_dir) if log_dir else None,
        observe=observe,
        redis_cluster=redis_cluster,
        durable=durable,
    )
    install_signal_handlers(stack)
    try:
        stack.up()
        stack.wait_ready()  # "up" only once the API listens; its failure is reported
    except StackError as exc:
        typer.echo(f"cannot start: {exc}", err=True)
        stack.down()
        raise typer.Exit(1) from None
    except BaseException:
        stack.down()
        raise
    if stack.stopping.is_set():  # Ctrl-C while it started
        stack.down()
        typer.echo("onlinepredict stopped.")
        return
    api_url = f"http://{settings.api_host}:{settings.api_port}"
    typer.echo(f"onlinepredict is up: API {api_url}, {workers} worker(s). Ctrl-C stops it.")
    typer.echo(f"Live dashboard: {api_url}/dashboard")
    rhost, rport = redis_address(stack.settings.redis_url)  # host:port, never a password
    typer.echo(f"Kafka {stack.settings.kafka_bootstrap}, Redis {rhost}:{rport}")
    if redis_cluster:
        typer.echo(f"Redis Cluster: {stack.settings.redis_url} (ONLINEPREDICT_REDIS_MODE=cluster)")
    urls = [f"http://127.0.0.1:{port}/metrics" for port in stack.worker_ports if port]
    if urls:
        typer.echo(f"Worker metrics: {' '.join(urls)}")
    if observe:
        if not stack.wait_api():
            typer.echo("the API did not come up: observability not started", err=True)
        else:
            for note in stack.start_observability():
                typer.echo(note)
    feeder = None
    if demo:
        feeder = _start_demo(stack.settings, stack.stopping, rate)
        stack.before_drain.append(lambda: feeder.join(10))  # its last sends, then the drain
    stack.run(on_tick=Progress(stack.settings).tick)
    if feeder is not None:
        feeder.join(10)
    typer.echo("onlinepredict stopped.")


def _start_demo(settings: Settings, stop: threading.Event, rate: float) -> threading.Thread:
    import asyncio

    from service.embedded.demo import Report, run_demo

    def show(rep: Report) -> None:
        te = f"{rep.tracking_error:.3e}" if rep.tracking_error is not None else "n/a"
        top = "  ".join(f"{name} {w:6.1%}" for name, w in rep.top)
        typer.echo(
            f"[{rep.kind}] sent {rep.events:6d} applied {rep.applied:6d} "
            f"tracking error {te} | top: {top}"
        )

    def target() -> None:
        try:
            asyncio.run(run_demo(settings, stop, rate=rate, report=show))
        except Exception:
            logger.exception("the demo feed failed")

    thread = threading.Thread(target=target, name="demo", daemon=True)
    thread.start()
    return thread


def _mount_client_commands() -> None:
    try:
        from clients.cli import register
    except ImportError as exc:  # the client package is optional for a server-only install
        logger.debug("client commands not mounted: %s", exc)
        return
    register(app)


_mount_client_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
