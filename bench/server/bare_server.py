"""The simplest server of a model, for comparison: a single-threaded Starlette app that runs each
``POST /detect`` inline (decode, resize, infer at batch 1, detections, JSON: the raw pipeline of
`bench.server.backend_throughput`), with no batching, no limits, no metrics and no worker threads.

    python -m bench.server.bare_server --model models/efficientdet-d0-synth-int8/1 --port 8737

It answers ``/health/ready`` (200) and ``/metrics`` (empty) so the load clients drive it like the service.
``--infer-thread`` runs each request's work in one dedicated thread instead (what one hand-off costs).
Not a way to serve: it is the yardstick for what the service's request path costs
(``scripts/bench/bench_request_path.py`` runs it beside ``detect-serve`` with ``BENCH_SERVER=bare``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bench.server.backend_throughput import pipeline_batch, resolve_entry
from service.errors import ServiceError
from service.runtime.backends import create_backend
from service.settings import Settings


def create_app(model_dir: str, settings: Settings, infer_thread: bool = False) -> Starlette:
    entry = resolve_entry(model_dir)
    backend = create_backend(entry, settings)
    executor = ThreadPoolExecutor(1) if infer_thread else None

    async def detect(request: Request) -> Response:
        body = await request.body()
        try:
            if executor is not None:
                loop = asyncio.get_running_loop()
                work = functools.partial(pipeline_batch, backend, entry, [body], settings)
                payload = (await loop.run_in_executor(executor, work))[0]
            else:
                payload = pipeline_batch(backend, entry, [body], settings)[0]  # inline: blocks the loop
        except ServiceError as exc:
            return JSONResponse({"error": str(exc), "field": exc.field}, status_code=exc.status_code)
        return Response(payload, media_type="application/json")

    async def ready(request: Request) -> Response:
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse("")

    routes = [
        Route("/detect", detect, methods=["POST"]),
        Route("/health/ready", ready),
        Route("/metrics", metrics),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        backend.close()

    return Starlette(routes=routes, lifespan=lifespan)


def http_parser() -> str:
    """The HTTP/1.1 parser ``DETECT_HTTP_PARSER`` names (httptools or h11), as `detect-serve` reads it."""
    return os.environ.get("DETECT_HTTP_PARSER", "httptools")


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="bare_server", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a model version folder (or a one-model repository)")
    parser.add_argument("--port", type=int, default=8737)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the runtime's default)")
    parser.add_argument("--infer-thread", action="store_true", help="run the work in one dedicated thread")
    args = parser.parse_args(argv)
    app = create_app(args.model, Settings(intra_op_threads=args.threads), args.infer_thread)
    # The HTTP/1.1 parser detect-serve runs (DETECT_HTTP_PARSER: httptools by default), on asyncio's own loop.
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        http=http_parser(),
        loop="asyncio",
        access_log=False,
        log_level="warning",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
