"""Both HTTP/1.1 protocols (`service.http.protocols`): the same limits, the same JSON answers.

Each runs in a uvicorn server on 127.0.0.1 (a thread of this process) in front of a small ASGI app, driven
over raw sockets; every wait is bounded. The uvicorn internals they subclass are checked too: a release
that renamed a method they override would leave the override uncalled (no header timeout, plain-text
400s) without any error. pyproject.toml pins uvicorn to a compatible-release range; these tests name what
changed when that range is moved. The default parser is also tested end to end, under a real
``detect-serve``, in tests/service/test_cli_hardening.py.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
import time
from collections.abc import Iterator

import h11
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from service.http.h11_protocol import LimitedH11Protocol
from service.http.httptools_protocol import LimitedHttpToolsProtocol
from service.http.protocols import config_options, protocol_class
from service.settings import Settings

PARSERS = ("httptools", "h11")
LIMITS = {"header_timeout_s": 0.5, "max_connections": 4, "max_header_bytes": 2048}
# The uvicorn methods each protocol overrides, with their parameters.
OVERRIDDEN = {
    (H11Protocol, LimitedH11Protocol): {
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "handle_events": ["self"],
        "on_response_complete": ["self"],
        "send_400_response": ["self", "msg"],
    },
    (HttpToolsProtocol, LimitedHttpToolsProtocol): {
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "on_message_begin": ["self"],
        "on_url": ["self", "url"],
        "on_header": ["self", "name", "value"],
        "on_headers_complete": ["self"],
        "on_response_complete": ["self"],
        "send_400_response": ["self", "msg"],
    },
}
# What they read of the protocol's state once uvicorn built it.
ATTRIBUTES = ("connections", "client", "app", "logger", "loop", "cycle")


@pytest.mark.parametrize(("uvicorn_class", "ours"), list(OVERRIDDEN))
def test_the_methods_they_override_keep_their_names_and_parameters(uvicorn_class: type, ours: type) -> None:
    for name, parameters in OVERRIDDEN[(uvicorn_class, ours)].items():
        where = f"uvicorn {uvicorn.__version__}: {uvicorn_class.__name__}.{name}"
        method = getattr(uvicorn_class, name, None)
        assert method is not None, f"{where} is gone"
        signature = inspect.signature(method)
        assert list(signature.parameters) == parameters, f"{where}{signature} changed"
        assert getattr(ours, name) is not method, f"{ours.__name__} no longer overrides {name}"


@pytest.mark.parametrize("parser", PARSERS)
def test_the_state_they_read_is_built_by_uvicorn(parser: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        cls = protocol_class(Settings(http_parser=parser, **LIMITS))
        config = Config(app=lambda: None, **config_options(Settings(**LIMITS)))
        protocol = cls(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    finally:
        loop.close()
    missing = [name for name in ATTRIBUTES if not hasattr(protocol, name)]
    assert not missing, f"uvicorn {uvicorn.__version__}: the {parser} protocol no longer sets {missing}"
    assert (protocol.header_timeout_s, protocol.max_connections, protocol.max_header_bytes) == (0.5, 4, 2048)
    if parser == "h11":
        assert isinstance(protocol.conn, h11.Connection) and protocol.conn.their_state is h11.IDLE
        assert hasattr(protocol.conn, "trailing_data"), (
            f"h11 {h11.__version__}: Connection.trailing_data is gone"
        )
    else:
        assert protocol.cycle is None


async def echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every request with the length of its body."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = json.dumps({"received": size}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module", params=PARSERS)
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    settings = Settings(http_parser=request.param, **LIMITS)
    config = uvicorn.Config(
        echo_length,
        host="127.0.0.1",
        port=0,
        http=protocol_class(settings),
        lifespan="off",
        log_level="critical",
        **config_options(settings),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(10)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


class Responses:
    """The responses read off one connection, in order (two may arrive in one read)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.data = b""

    def _more(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a response: {self.data!r}")
        self.data += chunk
        return chunk

    def next(self) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of the next Content-Length framed response."""
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, self.data = self.data.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        length = int(headers.get("content-length", "0"))
        while len(self.data) < length:
            self._more()
        body, self.data = self.data[:length], self.data[length:]
        return int(status_line.split()[1]), headers, body


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    return Responses(sock).next()


def post(body: bytes) -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_requests_on_one_connection_are_answered(port: int) -> None:
    with connect(port) as sock:
        for size in (0, 10, 100_000):
            sock.sendall(post(b"x" * size))
            status, _, body = read_response(sock)
            assert (status, json.loads(body)) == (200, {"received": size})


def test_a_head_and_body_larger_than_the_header_limit_in_one_write_are_answered(port: int) -> None:
    with connect(port) as sock:  # only the head counts against max_header_bytes
        sock.sendall(post(b"y" * 50_000) + post(b"z" * 3000))
        responses = Responses(sock)
        assert json.loads(responses.next()[2]) == {"received": 50_000}
        assert json.loads(responses.next()[2]) == {"received": 3000}


def test_trickled_headers_get_408_json_and_idle_connections_close(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127")
        status, headers, body = read_response(sock)
        assert (status, headers["content-type"]) == (408, "application/json")
        assert json.loads(body) == {"error": "request headers not received within 0.5s", "field": None}
    with connect(port) as sock:  # nothing sent at all: closed without a response
        started = time.monotonic()
        assert closed(sock)
        assert time.monotonic() - started < 3
    with connect(port) as sock:  # the next request's headers have as long after a response
        sock.sendall(post(b"a"))
        assert read_response(sock)[0] == 200
        sock.sendall(b"GET /echo HTTP/1.1\r\n")
        assert read_response(sock)[0] == 408


def test_malformed_http_gets_json_400(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        status, headers, body = read_response(sock)
    assert (status, headers["content-type"]) == (400, "application/json")
    assert json.loads(body)["error"].startswith("malformed HTTP request")


@pytest.mark.parametrize(
    "head",
    [
        b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 4000 + b"\r\n\r\n",  # one write, complete
        b"GET /" + b"u" * 4000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a long URL
        b"GET /echo HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 400 + b"\r\n",  # many short headers
    ],
    ids=["long-value", "long-url", "many-headers"],
)
def test_a_head_over_the_limit_gets_json_431_and_the_connection_closes(port: int, head: bytes) -> None:
    with connect(port) as sock:
        sock.sendall(head)
        status, headers, body = read_response(sock)
        assert (status, headers["content-type"], headers["connection"]) == (431, "application/json", "close")
        assert json.loads(body)["error"] == (
            "request line and headers exceed 2048 bytes (DETECT_MAX_HEADER_BYTES)"
        )
        assert closed(sock)


def test_a_header_value_trickled_past_the_limit_gets_431_before_it_ends(port: int) -> None:
    with connect(port) as sock:  # the value never ends: what the parser buffers must stay bounded
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        for _ in range(30):
            try:
                sock.sendall(b"v" * 500)
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.005)
        status, _, body = read_response(sock)
        assert status == 431, body


def test_connections_over_the_cap_get_json_503(port: int) -> None:
    held = [connect(port) for _ in range(4)]
    try:
        for sock in held:  # each holds a request open: its body is still to come
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        with connect(port) as over:
            over.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = read_response(over)
        assert (status, headers["content-type"], headers["retry-after"]) == (503, "application/json", "1")
        assert json.loads(body)["error"] == "too many open connections; retry shortly"
    finally:
        for sock in held:
            sock.close()
