"""Which URLs a stream session may open, and how a URL with a password is reported."""

from __future__ import annotations

import pytest

from service.errors import BadRequest, Forbidden
from service.streams.sources import check_source, redact, redact_in

ALLOWED = ("rtsp://cameras.local/", "http://127.0.0.1:9000/")


@pytest.mark.parametrize(
    "url",
    [
        "rtsp://cameras.local/door",
        "http://127.0.0.1:9000/mjpeg/a",
        "rtsp://cameras.local/",
        "rtsp://admin:p%40ss@cameras.local/door",  # credentials do not change the address
    ],
)
def test_a_url_under_an_allowed_prefix_is_accepted(url: str) -> None:
    check_source(url, ALLOWED)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("file:///etc/passwd", BadRequest),
        ("concat:http://127.0.0.1:9000/a|file:///etc/passwd", BadRequest),
        ("/etc/passwd", BadRequest),
        ("http://127.0.0.1:9000/a b", BadRequest),
        ("http://127.0.0.1:9001/mjpeg/a", Forbidden),
        ("rtsp://cameras.local.evil.example/x", Forbidden),
        ("https://127.0.0.1:9000/mjpeg/a", Forbidden),
    ],
)
def test_other_urls_are_refused_with_the_reason(url: str, error: type[Exception]) -> None:
    with pytest.raises(error) as raised:
        check_source(url, ALLOWED)
    assert getattr(raised.value, "field", None) == "url"


@pytest.mark.parametrize(
    "url",
    [
        "rtsp://cameras.local@evil.example/x",  # user "cameras.local" at evil.example
        "rtsp://cameras.local.evil.example/x",
        "rtsp://cameras.localhost/x",
    ],
)
def test_a_prefix_without_its_slash_still_matches_only_its_own_host(url: str) -> None:
    check_source("rtsp://cameras.local:8554/door", ("rtsp://cameras.local",))
    check_source("rtsp://cameras.local/door", ("rtsp://user:pw@cameras.local",))
    with pytest.raises(Forbidden):
        check_source(url, ("rtsp://cameras.local",))


def test_with_no_prefix_configured_sessions_are_off() -> None:
    with pytest.raises(Forbidden, match="DETECT_STREAM_SOURCES"):
        check_source("http://127.0.0.1:9000/a", ())


def test_a_password_is_never_reported() -> None:
    assert redact("rtsp://admin:hunter2@cam.local:554/live") == "rtsp://admin:***@cam.local:554/live"
    assert redact("http://127.0.0.1:9000/a") == "http://127.0.0.1:9000/a"


def test_a_password_is_taken_out_of_an_error_about_its_url() -> None:
    url = "rtsp://admin:p%40ss@cam.local:554/live"
    error = f"Server returned 401 Unauthorized (authorization failed): '{url}'"
    assert redact_in(error, url) == (
        "Server returned 401 Unauthorized (authorization failed): 'rtsp://admin:***@cam.local:554/live'"
    )
    # Written elsewhere, as in the URL or decoded: hidden too.
    assert redact_in("login p%40ss refused, p@ss wrong", url) == "login *** refused, *** wrong"
    assert redact_in(f"no answer: '{url}'", "rtsp://cam.local/live") == f"no answer: '{url}'"  # no password
