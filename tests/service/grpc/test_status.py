"""The one mapping from domain errors to gRPC status codes."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from service import errors
from service.grpc.status import GRPC_CODES, grpc_code, trailing_metadata


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.PayloadTooLarge, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
        (errors.ModelNotFound, grpc.StatusCode.NOT_FOUND),
        (errors.QueueFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.ServiceUnavailable, grpc.StatusCode.UNAVAILABLE),
        (errors.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
        (errors.BackendError, grpc.StatusCode.INTERNAL),
        (errors.ClientClosedRequest, grpc.StatusCode.CANCELLED),
    ],
)
def test_domain_errors_map_to_codes(error: type[errors.ServiceError], code: grpc.StatusCode) -> None:
    assert grpc_code(error("x")) == code


def test_every_domain_error_has_a_code() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ServiceError)]
    assert {c.status_code for c in classes} <= set(GRPC_CODES)


def test_other_exceptions() -> None:
    assert grpc_code(ValueError("x")) == grpc.StatusCode.INTERNAL
    assert grpc_code(asyncio.CancelledError()) == grpc.StatusCode.CANCELLED


def test_trailing_metadata_rounds_retry_after_up() -> None:
    error = errors.QueueFull("busy", retry_after_s=0.2, field="images")
    assert trailing_metadata(error) == (("retry-after", "1"), ("error-field", "images"))
    assert trailing_metadata(errors.BadRequest("bad")) == ()
