"""Which stream URLs the server opens, and how they are shown.

Only rtsp, rtsps, http and https URLs that start with a prefix of ``stream_sources`` (DETECT_STREAM_SOURCES)
are opened; FFmpeg is told the same protocols (``protocol_whitelist``), so a source cannot make it open a
file, a pipe or a concatenation from inside (an HLS playlist naming file:// segments). A password in a URL
is never reported (`redact`).

Prefixes are compared with the URL's address, its user and password taken out (`address`): a camera's
credentials do not change where it is, so ``rtsp://cam.local/`` allows ``rtsp://admin:pw@cam.local/door``,
while ``rtsp://cam.local@evil.example/`` (user "cam.local" at evil.example) is refused. A prefix matches
only up to a boundary: what follows it in the URL starts with ``/``, ``:``, ``?`` or ``#`` (or the prefix
ends with ``/``), so ``rtsp://cam.local`` does not allow ``rtsp://cam.local.evil.example/``.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from service.errors import BadRequest, Forbidden

SCHEMES = ("rtsp", "rtsps", "http", "https")
# What FFmpeg may open on a session's behalf, also from inside a source (an HLS playlist's segments, an
# RTSP session's data channels): never file, pipe, concat, subfile or data.
PROTOCOL_WHITELIST = "http,https,tcp,tls,udp,rtp,rtsp,rtsps,srtp,crypto,httpproxy"


class StreamsOff(Forbidden):
    def __init__(self) -> None:
        super().__init__(
            "stream sessions are off on this server: DETECT_STREAM_SOURCES lists no allowed URL prefix"
        )


def check_source(url: str, prefixes: tuple[str, ...]) -> None:
    """`BadRequest` for a URL that is not rtsp(s)/http(s), `Forbidden` (403) for one outside ``prefixes``."""
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise BadRequest("url must not contain whitespace or control characters", field="url")
    scheme = urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise BadRequest(
            f"url scheme {scheme or '(none)'!r} is not allowed: use one of {', '.join(SCHEMES)}", field="url"
        )
    if not prefixes:
        raise StreamsOff()
    if not any(under_prefix(address(url), address(prefix)) for prefix in prefixes):
        raise Forbidden(
            f"url {redact(url)!r} does not start with an allowed source prefix (DETECT_STREAM_SOURCES)",
            field="url",
        )


def address(url: str) -> str:
    """``url`` without its user and password (``rtsp://admin:pw@cam:554/x`` -> ``rtsp://cam:554/x``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def under_prefix(url: str, prefix: str) -> bool:
    """Whether ``url`` starts with ``prefix`` up to a boundary (see the module docstring)."""
    if not url.startswith(prefix):
        return False
    return prefix.endswith("/") or len(url) == len(prefix) or url[len(prefix)] in "/:?#"


def redact(url: str) -> str:
    """``url`` without a password (``rtsp://user:***@host/...``), as reports show it."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def redact_in(text: str, url: str) -> str:
    """``text`` (an error or log about ``url``) with the URL's password shown as ``***`` wherever it
    appears (FFmpeg's errors name the URL they failed on)."""
    password = urlsplit(url).password
    if not password:
        return text
    text = text.replace(url, redact(url))
    for secret in {password, unquote(password)}:  # as written, and decoded
        text = text.replace(secret, "***")
    return text
