"""A LitServe (Lightning AI) server of a model: a peer of ``detect-serve`` for the request-path benchmark.

The same model loaded through the service's backend factory, the same decode, resize, detections and JSON
response body as `bench.server.bare_server` (`bench.server.backend_throughput.pipeline_batch`), served
the way LitServe serves: an HTTP process handing each ``POST /detect`` (the raw image as the body) through a
queue to one inference worker process on the CPU, which forms dynamic batches and runs one ``infer`` per
batch.

    python -m bench.server.peer_litserve --model models/efficientdet-d0-synth-int8/1 --port 8738

``--max-batch-size`` and ``--batch-timeout`` (seconds) are LitServe's batching knobs (defaults as
``detect-serve``'s: 8 images, 5 ms). It answers ``GET /health`` (LitServe's: 200 once the worker has loaded
the model, 503 before) and ``/metrics`` (empty) so the load clients drive it like the service
(``scripts/bench/bench_request_path.py`` runs it with ``BENCH_SERVER=litserve``). HTTP is the parser
``DETECT_HTTP_PARSER`` names (httptools by default) on asyncio's loop, as ``detect-serve`` runs. The server's
CPU is spread over its processes, which the load clients' per-request server CPU counts
(`bench.load.proc_cpu.cpu_times` sums a process and its children).

litserve is a development dependency only (the ``dev`` extra), not part of the serving install.
"""

# No `from __future__ import annotations`: LitServe reads `decode_request`'s parameter annotation at run
# time to build the endpoint (the request body as raw bytes), and `encode_response`'s return annotation.

import argparse
import os
import signal
import sys
from typing import Annotated, Any

import litserve as ls
from fastapi import Body, HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from bench.server.backend_throughput import pipeline_batch, resolve_entry
from bench.server.bare_server import http_parser
from service.errors import ServiceError
from service.runtime.backends import Backend, create_backend
from service.runtime.repository import ModelEntry
from service.settings import Settings

# FastAPI hands a body whose content type is not JSON (image/jpeg) over as its bytes.
RawBody = Annotated[bytes, Body(media_type="image/jpeg")]


class DetectAPI(ls.LitAPI):  # type: ignore[misc]  # litserve ships no type hints
    """``POST /detect``: the image bytes in, the service's JSON detections out, batched by LitServe."""

    def __init__(self, model_dir: str, threads: int, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path="/detect")
        self.model_dir = model_dir
        self.threads = threads

    def setup(self, device: str) -> None:
        # In the inference worker process (spawned): the model is loaded there, as bare_server loads it.
        self.settings = Settings(intra_op_threads=self.threads)
        self.entry: ModelEntry = resolve_entry(self.model_dir)
        self.backend: Backend = create_backend(self.entry, self.settings)

    def decode_request(self, request: RawBody) -> bytes:
        return request

    def batch(self, inputs: list[bytes]) -> list[bytes]:
        return list(inputs)

    def predict(self, x: list[bytes] | bytes) -> list[str] | str:
        # With --max-batch-size 1 LitServe calls neither batch nor unbatch: one image, one body.
        images = x if isinstance(x, list) else [x]
        try:
            bodies = pipeline_batch(self.backend, self.entry, images, self.settings)
        except ServiceError as exc:
            # LitServe answers every request of the batch with this error.
            raise HTTPException(exc.status_code, {"error": str(exc), "field": exc.field}) from exc
        return bodies if isinstance(x, list) else bodies[0]

    def unbatch(self, output: list[str]) -> list[str]:
        return output

    def encode_response(self, output: str) -> Response:
        return Response(output, media_type="application/json")


async def metrics(request: Request) -> Response:
    return PlainTextResponse("")


def create_server(model_dir: str, threads: int, max_batch_size: int, batch_timeout: float) -> Any:
    """The LitServer (not started); its batches are at most what the model's artifact accepts."""
    entry = resolve_entry(model_dir)  # fails here, before any worker starts, if the folder holds no model
    api = DetectAPI(model_dir, threads, min(max_batch_size, entry.manifest.max_batch_size), batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.app.add_api_route("/metrics", metrics, methods=["GET"])
    return server


_MAIN_PID = os.getpid()


def _interrupt(signum: int, frame: object) -> None:
    if os.getpid() != _MAIN_PID:  # a forked HTTP process, re-raising its signal once it has shut down
        raise SystemExit(0)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="peer_litserve", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a model version folder (or a one-model repository)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8738)
    parser.add_argument("--max-batch-size", type=int, default=8, help="LitServe's largest batch")
    parser.add_argument(
        "--batch-timeout", type=float, default=0.005, help="seconds LitServe waits for a batch to fill"
    )
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the runtime's default)")
    args = parser.parse_args(argv)
    server = create_server(args.model, args.threads, args.max_batch_size, args.batch_timeout)
    # LitServer.run stops its HTTP, worker and manager processes on KeyboardInterrupt; a plain SIGTERM (what
    # bench_request_path sends) would end this process alone and leave them running, the port held.
    signal.signal(signal.SIGTERM, _interrupt)
    server.run(
        host=args.host,
        port=args.port,
        log_level="warning",
        generate_client_file=False,  # would write client.py into the working directory
        http=http_parser(),
        loop="asyncio",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
