"""Which addresses a session may connect to: the allowed prefixes, then the classes of the addresses a
host name resolves to (with a resolver the test injects: no DNS, no /etc/hosts)."""

from __future__ import annotations

import ipaddress

import pytest

from service.streams.guard import (
    AddressClass,
    Resolver,
    SourceGuard,
    SourceRefused,
    address_class,
    parse_address_classes,
)


def resolver(table: dict[str, list[str]]) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


@pytest.mark.parametrize(
    ("ip", "kind"),
    [
        ("8.8.8.8", "public"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.10", "private"),
        ("100.64.0.1", "private"),
        ("fd00::1", "private"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("::ffff:169.254.169.254", "link-local"),
        ("0.0.0.0", None),
        ("224.0.0.1", None),
        ("240.0.0.1", None),
    ],
)
def test_addresses_are_classed(ip: str, kind: AddressClass | None) -> None:
    assert address_class(ipaddress.ip_address(ip)) == kind


def test_address_classes_are_parsed_and_unknown_ones_refused() -> None:
    assert parse_address_classes(" public, private ") == {"public", "private"}
    with pytest.raises(ValueError, match="metadata"):
        parse_address_classes("public,metadata")


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (["127.0.0.1"], "loopback"),
        (["169.254.169.254"], "link-local"),
        (["10.0.0.5"], "private"),
        (["8.8.8.8", "127.0.0.1"], "loopback"),  # one forbidden address among several refuses the name
        (["0.0.0.0"], "reserved"),
    ],
)
def test_a_listed_name_that_resolves_to_a_forbidden_class_is_refused(answer: list[str], kind: str) -> None:
    guard = SourceGuard(("rtsp://cam.example/",), resolve=resolver({"cam.example": answer}))
    with pytest.raises(SourceRefused) as refused:
        guard.check("rtsp://admin:secret@cam.example/door")
    message = str(refused.value)
    assert f"a {kind} address" in message and "DETECT_STREAM_ADDRESS_CLASSES allows public" in message
    assert "secret" not in message and "admin:***@cam.example" in message


def test_allowed_classes_let_the_name_through_with_the_addresses_checked() -> None:
    table = {"cam.example": ["10.0.0.5", "10.0.0.6"]}
    guard = SourceGuard(("rtsp://cam.example/",), frozenset({"private"}), resolve=resolver(table))
    checked = guard.check("rtsp://cam.example/door")
    assert checked.addresses == ("10.0.0.5", "10.0.0.6") and checked.port == 554


def test_an_ip_address_written_in_a_prefix_is_the_operators_choice() -> None:
    guard = SourceGuard(("http://127.0.0.1:9000/",), resolve=resolver({}))
    assert guard.check("http://127.0.0.1:9000/mjpeg/a").addresses == ("127.0.0.1",)
    # ... only under that prefix: another loopback address, or a name, is classed as usual.
    with pytest.raises(SourceRefused, match="not start with an allowed source prefix"):
        guard.check("http://127.0.0.2:9000/mjpeg/a")


def test_a_url_outside_the_prefixes_is_refused_before_any_resolution() -> None:
    def resolve(host: str, port: int) -> list[str]:
        raise AssertionError(f"resolved {host}")

    guard = SourceGuard(("http://127.0.0.1:9000/",), resolve=resolve)
    for url in ("http://127.0.0.1:9001/a", "file:///etc/passwd", "http://evil.example/a"):
        with pytest.raises(SourceRefused, match="refused to open"):
            guard.check(url)
