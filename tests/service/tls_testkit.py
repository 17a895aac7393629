"""A TLS server context on a self-signed certificate made by ``openssl`` for the test, for servers the
tests start on 127.0.0.1 (a camera speaking RTSPS)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

OPENSSL_SELF_SIGNED = (
    "openssl",
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "1",
    "-subj",
    "/CN=x",
)


def self_signed_server_context(folder: Path) -> ssl.SSLContext:
    """A TLS server context whose key and certificate are written to ``folder``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (a self-signed certificate for the camera)")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [*OPENSSL_SELF_SIGNED, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    return tls
