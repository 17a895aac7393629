"""``detect-serve``: run the service with uvicorn and drain gracefully on SIGTERM / Ctrl-C.

    detect-serve --model-repository models --host 0.0.0.0 --port 8000

Flags override ``DETECT_*`` environment variables (see `service.settings.Settings`). A broken model
repository, or an ``ONEDNN_MAX_CPU_ISA`` that oneDNN does not know, exits with status 2 before the server
starts.

On the first SIGTERM or SIGINT the server keeps listening but drains: readiness fails at once (so a
load balancer stops routing here), new detect requests get 503, requests in flight and queued work
complete (up to ``drain_timeout_s``); then uvicorn shuts down and the batchers stop. A second signal
exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from service.http.lifecycle import Lifecycle

logger = logging.getLogger("service.cli")


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first exit signal starts a drain instead of closing the listener."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, drain_timeout_s: float):
        super().__init__(config)
        self._lifecycle = lifecycle
        self._drain_timeout_s = drain_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_requested = False
        self._drain_task: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as a signal handler: only hand the work to the event loop. Unlike uvicorn's own handler,
        # the signal is not re-raised after shutdown, so a completed drain exits with status 0.
        if self._drain_requested or self._loop is None:
            self.force_exit = self._drain_requested
            self.should_exit = True
            return
        self._drain_requested = True
        logger.info("received %s: draining", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        self._lifecycle.begin_drain()
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        if not await self._lifecycle.wait_idle(self._drain_timeout_s):
            logger.warning(
                "drain timeout (%.1fs) with %d request(s) still in flight",
                self._drain_timeout_s,
                self._lifecycle.in_flight,
            )
        self._lifecycle.close()  # uploads still arriving get 503 JSON now rather than a cancellation
        await asyncio.sleep(0.05)  # let them answer before uvicorn closes the connections
        self.should_exit = True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="detect-serve", description="Serve object detection models over HTTP."
    )
    parser.add_argument(
        "--model-repository", type=Path, help="folder of <name>/<version>/ models (default: models)"
    )
    parser.add_argument("--host", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default: 8000; 0 picks a free one)")
    parser.add_argument(
        "--backend",
        choices=["auto", "cpu", "openvino", "cuda", "tensorrt-ep", "tensorrt"],
        help="inference runtime",
    )
    parser.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported after parsing, so --help answers at once (FastAPI and the app take ~1 s to import).
    from pydantic import ValidationError

    from service.app import create_app
    from service.http.auth import ApiKeyError
    from service.http.protocols import config_options, protocol_class
    from service.runtime import tracing
    from service.runtime.memory import limit_heap_growth
    from service.runtime.repository import RepositoryError
    from service.settings import Settings

    overrides = {key: value for key, value in vars(args).items() if value is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"detect-serve: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    limit_heap_growth(settings.malloc_mmap_threshold_kib)
    try:
        traces = tracing.configure_from_environment()  # OTEL_* variables; off unless they ask
        app = create_app(settings)
    except (RepositoryError, ApiKeyError, ValueError) as exc:
        print(f"detect-serve: {exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        lifespan="on",
        http=protocol_class(settings),
        **config_options(settings),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        # In-flight requests were already drained; this only bounds closing the remaining connections.
        timeout_graceful_shutdown=5,
    )
    server = DrainingServer(config, app.state.lifecycle, settings.drain_timeout_s)
    try:
        server.run()
    finally:
        traces.shutdown()  # export the spans still buffered
    return 0


if __name__ == "__main__":
    sys.exit(main())
