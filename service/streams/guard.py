"""Where a session may connect: every URL opened for it, not only the one a client posts.

`SourceGuard.check` is asked before each connection a session makes: the posted URL, each hop of a
redirect, an HLS playlist's variants, segments and keys (`service.streams.fetch`), an RTSP source at each
open (`service.streams.rtsp_relay`, which never passes a redirect on). A URL passes when

1. its address (user and password taken out) starts with a prefix of ``stream_sources``
   (`service.streams.sources.check_source`: scheme, host and port at a boundary), and
2. its host resolves only to addresses of a class the operator allows (``stream_address_classes``):
   ``public`` (the default), ``private`` (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7),
   ``loopback`` and ``link-local`` (169.254/16, which holds the cloud metadata address
   169.254.169.254, and fe80::/10). An IP address written as the host of a prefix is the operator's
   own choice and always passes for URLs under that prefix; multicast, unspecified (0.0.0.0, which
   reaches the local host) and reserved addresses never pass.

The addresses checked are the ones connected to (`Checked.addresses`): a name is resolved once, so a
DNS answer that changes between the check and the connection (DNS rebinding) cannot move a session.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from service.errors import ServiceError
from service.streams.sources import address, check_source, redact, under_prefix

AddressClass = Literal["public", "private", "loopback", "link-local"]
ADDRESS_CLASSES: tuple[AddressClass, ...] = ("public", "private", "loopback", "link-local")
Redirects = Literal["off", "same-allowlist"]
# A host name and port -> the IP addresses it resolves to (as text).
Resolver = Callable[[str, int], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443, "rtsp": 554, "rtsps": 322}
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not global, not "private" to Python


class SourceRefused(OSError):
    """A URL a session would open is outside what the server allows; the message names it."""


def system_resolver(host: str, port: int) -> list[str]:
    """``host``'s addresses from the system's resolver (`socket.getaddrinfo`). A name that does not
    resolve is an `OSError` (the session retries: a DNS outage is not a refusal)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host!r}: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_class(ip: IPAddress) -> AddressClass | None:
    """The class of ``ip`` (None: multicast, unspecified or reserved: never connected to)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return None
    if ip.is_global:
        return "public"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED):
        return "private"
    return None


def parse_address_classes(value: str) -> frozenset[AddressClass]:
    """``"public,private"`` -> the classes; `ValueError` naming an unknown one."""
    names = {part.strip() for part in value.split(",") if part.strip()}
    unknown = names - set(ADDRESS_CLASSES)
    if unknown:
        raise ValueError(f"unknown address class {sorted(unknown)}: use {', '.join(ADDRESS_CLASSES)}")
    return frozenset(c for c in ADDRESS_CLASSES if c in names)


@dataclass(frozen=True)
class Checked:
    """A URL that passed: where to connect (``addresses``, all checked) and what to call it."""

    url: str
    scheme: str
    host: str  # as written in the URL (a name, or an IP address)
    port: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class SourceGuard:
    """See the module docstring. One per server (from the settings), shared by its sessions."""

    prefixes: tuple[str, ...]
    address_classes: frozenset[AddressClass] = frozenset({"public"})
    redirects: Redirects = "off"
    resolve: Resolver = system_resolver

    def check(self, url: str) -> Checked:
        """``url``'s checked addresses; `SourceRefused` naming the URL (password hidden) otherwise."""
        try:
            check_source(url, self.prefixes)
        except ServiceError as exc:
            raise SourceRefused(f"refused to open {redact(url)}: {exc.message}") from exc
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise SourceRefused(f"refused to open {redact(url)}: {exc}") from exc
        if not host:
            raise SourceRefused(f"refused to open {redact(url)}: no host")
        literal = _ip(host)
        if literal is not None and self._operator_listed(url, host):
            return Checked(url, scheme, host, port, (str(literal),))
        found = [str(literal)] if literal is not None else self.resolve(host, port)
        if not found:
            raise SourceRefused(f"refused to open {redact(url)}: {host!r} resolves to no address")
        for text in found:
            ip = _ip(text)
            kind = address_class(ip) if ip is not None else None
            if kind is None or kind not in self.address_classes:
                allowed = ",".join(sorted(self.address_classes)) or "none"
                raise SourceRefused(
                    f"refused to open {redact(url)}: {host} is {text}, a {kind or 'reserved'} address "
                    f"(DETECT_STREAM_ADDRESS_CLASSES allows {allowed})"
                )
        return Checked(url, scheme, host, port, tuple(found))

    def _operator_listed(self, url: str, host: str) -> bool:
        """Whether a prefix that admits ``url`` names ``host`` (an IP address) itself."""
        bare = address(url)
        return any(
            urlsplit(prefix).hostname == host and under_prefix(bare, address(prefix))
            for prefix in self.prefixes
        )


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
