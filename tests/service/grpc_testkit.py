"""A detect-serve process with its gRPC port open, and tritonclient.grpc clients for it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import tritonclient.grpc as triton_grpc
from service_testkit import Server

ENV = {
    "DETECT_INTRA_OP_THREADS": "1",
    "DETECT_ACCESS_LOG": "false",
    "DETECT_MAX_QUEUE_DELAY_MS": "2",
    "DETECT_GRPC_PORT": "0",
}


class GrpcServer(Server):
    """`Server` with ``DETECT_GRPC_PORT=0``; ``grpc_url`` is the port it bound (from its log)."""

    def __init__(self, repo: Path, env: dict[str, str]):
        super().__init__(repo, {**ENV, **env})
        match = re.search(r"gRPC server .* listening on 127\.0\.0\.1:(\d+)", self.full_log())
        assert match, "no gRPC port in the log:\n" + self.full_log()
        self.grpc_url = f"127.0.0.1:{match.group(1)}"
        with httpx.Client(base_url=self.url, timeout=10) as client:
            self.wait_until(lambda: client.get("/v2/health/ready").status_code == 200, "readiness")

    def client(self) -> triton_grpc.InferenceServerClient:
        return triton_grpc.InferenceServerClient(self.grpc_url)
