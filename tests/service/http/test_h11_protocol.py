"""The uvicorn internals `service.http.h11_protocol.LimitedH11Protocol` builds on are still there.

It subclasses uvicorn's private ``H11Protocol``: a release that renames a method it overrides would leave
the override uncalled (no header timeout, plain-text 400s) without any error. pyproject.toml pins uvicorn
to a compatible-release range; this test names what changed when that range is moved. The behaviour
itself is tested end to end in tests/service/test_cli_hardening.py.
"""

from __future__ import annotations

import asyncio
import inspect

import h11
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from service.http.h11_protocol import LimitedH11Protocol, protocol_class
from service.settings import Settings

# H11Protocol's methods that LimitedH11Protocol overrides, with their parameters.
OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "handle_events": ["self"],
    "on_response_complete": ["self"],
    "send_400_response": ["self", "msg"],
}
# What it reads of the protocol's state once uvicorn built it.
ATTRIBUTES = ("conn", "connections", "app", "logger", "loop", "cycle")


def test_the_methods_it_overrides_keep_their_names_and_parameters() -> None:
    for name, parameters in OVERRIDDEN.items():
        method = getattr(H11Protocol, name, None)
        assert method is not None, f"uvicorn {uvicorn.__version__}: H11Protocol.{name} is gone"
        assert list(inspect.signature(method).parameters) == parameters, (
            f"uvicorn {uvicorn.__version__}: H11Protocol.{name}{inspect.signature(method)} changed"
        )
        assert name in vars(LimitedH11Protocol), f"LimitedH11Protocol no longer overrides {name}"


def test_the_state_it_reads_is_built_by_uvicorn() -> None:
    loop = asyncio.new_event_loop()
    try:
        cls = protocol_class(Settings(header_timeout_s=3.0, max_connections=2))
        protocol = cls(config=Config(app=lambda: None), server_state=ServerState(), app_state={}, _loop=loop)
    finally:
        loop.close()
    missing = [name for name in ATTRIBUTES if not hasattr(protocol, name)]
    assert not missing, f"uvicorn {uvicorn.__version__}: H11Protocol no longer sets {missing}"
    assert isinstance(protocol.conn, h11.Connection) and protocol.conn.their_state is h11.IDLE
    assert hasattr(protocol.conn, "trailing_data"), f"h11 {h11.__version__}: Connection.trailing_data is gone"
    assert (protocol.header_timeout_s, protocol.max_connections) == (3.0, 2)
