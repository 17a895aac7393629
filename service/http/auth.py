"""Optional API keys: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

Keys come from ``DETECT_API_KEYS`` (comma-separated) and/or ``DETECT_API_KEYS_FILE`` (one per line,
``#`` comments; a Kubernetes Secret mounted as a file). With none configured the API is open. Probes
and the API documentation stay open whatever the keys, so the kubelet and load balancers need no
credentials. A key is compared
with every configured key in constant time (`hmac.compare_digest` on SHA-256 digests, so neither the
matching key nor its length shows in the timing). A missing or wrong key gets 401 JSON with
``WWW-Authenticate``, before the body is read.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import Unauthorized
from service.http.error_responses import error_response
from service.settings import Settings

# Paths that never need a key: liveness and readiness probes (native and Open Inference Protocol), the
# API's own documentation (which `DETECT_DOCS=false` turns off), and the web page with its static files (its
# requests send the key).
OPEN_PREFIXES = ("/health/", "/v2/health/", "/static/")
OPEN_PATHS = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


class ApiKeyError(ValueError):
    """The key file is missing or holds no key (the server refuses to start rather than run open)."""


def load_api_keys(settings: Settings) -> list[str]:
    """The configured keys, from the setting and the file. Raises `ApiKeyError` for a bad key file."""
    keys: list[str] = []
    if settings.api_keys is not None:
        keys += [k.strip() for k in settings.api_keys.get_secret_value().split(",") if k.strip()]
    path = settings.api_keys_file
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ApiKeyError(f"api_keys_file {str(path)!r} cannot be read: {exc.strerror or exc}") from exc
        from_file = [line.strip() for line in text.splitlines()]
        from_file = [line for line in from_file if line and not line.startswith("#")]
        if not from_file:
            raise ApiKeyError(f"api_keys_file {str(path)!r} holds no key (one key per line)")
        keys += from_file
    return keys


def presented_key(headers: dict[bytes, bytes]) -> str | None:
    """The key a request carries: ``Authorization: Bearer <key>``, else ``X-API-Key``."""
    authorization = headers.get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    key = headers.get(b"x-api-key", b"").decode("latin-1").strip()
    return key or None


class ApiKeys:
    """The configured keys, as digests: `accepts` compares a presented key with every one in constant time.
    Shared by the HTTP middleware and the gRPC server (`service.grpc.auth`)."""

    def __init__(self, keys: list[str]):
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    def accepts(self, key: str | None) -> bool:
        if key is None:
            return False
        digest = hashlib.sha256(key.encode()).digest()
        matched = False
        for expected in self._digests:  # no early exit: every key is compared
            matched |= hmac.compare_digest(digest, expected)
        return matched


def missing_key_error(key: str | None) -> Unauthorized:
    """The error for a request without a valid key (``key``: the one it presented, if any)."""
    reason = "no API key" if key is None else "invalid API key"
    return Unauthorized(
        f"{reason}: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'", field="authorization"
    )


class ApiKeyMiddleware:
    """Pure ASGI: 401 for HTTP requests without a valid key, except on `OPEN_PREFIXES`."""

    def __init__(self, app: ASGIApp, *, keys: list[str]):
        self.app = app
        self.keys = ApiKeys(keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        key = presented_key(dict(scope["headers"]))
        if self.keys.accepts(key):
            await self.app(scope, receive, send)
            return
        await error_response(missing_key_error(key))(scope, receive, send)
