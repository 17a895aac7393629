"""Listeners on 127.0.0.1 for tests of where the server connects: one that only counts the connections it
accepts (a forbidden address), and an HTTP server whose answers a test sets path by path (redirects,
playlists)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class CountingListener:
    """A listening socket on 127.0.0.1 that accepts and counts connections (and closes them at once)."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self._socket.settimeout(0.05)
        self.port: int = self._socket.getsockname()[1]
        self._accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="counting-listener", daemon=True)

    def url(self, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{path.lstrip('/')}"

    @property
    def accepted(self) -> int:
        """Connections accepted so far, those still in the backlog included (waits 0.1 s for them)."""
        time.sleep(0.1)
        return self._accepted

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._accepted += 1
            connection.close()

    def __enter__(self) -> CountingListener:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(2)
        self._socket.close()


Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


class ScriptedServer:
    """An HTTP server on 127.0.0.1 answering each path as ``answers[path]`` says (404 otherwise); a list
    of answers is played in order, its last one repeated. ``requests`` counts the requests per path."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer | list[Answer]] = {}
        self.requests: dict[str, int] = {}
        handler = type("Handler", (_ScriptedHandler,), {"server_of": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted", daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{path.lstrip('/')}"

    @property
    def base_url(self) -> str:
        return self.url("")

    def redirect(self, path: str, to: str, status: int = 302) -> None:
        self.answers[path] = (status, {"Location": to}, b"")

    def answer(self, path: str) -> Answer:
        count = self.requests.get(path, 0)
        self.requests[path] = count + 1
        answer = self.answers.get(path, (404, {}, b"not here"))
        if isinstance(answer, list):
            return answer[min(count, len(answer) - 1)]
        return answer

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


class _ScriptedHandler(BaseHTTPRequestHandler):
    server_of: ScriptedServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status, headers, body = self.server_of.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
