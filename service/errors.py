"""Domain errors: what went wrong with a request, and the HTTP status each kind answers with.

Every layer raises these; `service.http.error_responses` alone turns them into responses. Overload
answers (429, 503) carry ``retry_after_s``; a request that could not start before its deadline gets 504;
a failing inference gets 500 for the requests of that batch only.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base class: ``status_code`` is the HTTP status; ``field`` names the offending input, if any."""

    status_code = 500

    def __init__(self, message: str, *, field: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s


class BadRequest(ServiceError):
    """The request is malformed: an undecodable image, a bad parameter, a wrong multipart field."""

    status_code = 400


class Unauthorized(ServiceError):
    """No or a wrong API key (the response carries ``WWW-Authenticate``)."""

    status_code = 401


class Forbidden(ServiceError):
    """The request is understood but not allowed: e.g. a stream URL outside the allowed sources."""

    status_code = 403


class ModelNotFound(ServiceError):
    status_code = 404


class NotFound(ServiceError):
    """The resource the path names does not exist (or its feature is off)."""

    status_code = 404


class NotAcceptable(ServiceError):
    """The client asked for a representation the endpoint cannot produce."""

    status_code = 406


class RequestTimeout(ServiceError):
    """The request body stopped arriving (idle timeout) or took too long in all (total timeout)."""

    status_code = 408


class PayloadTooLarge(ServiceError):
    """The body exceeds ``max_body_bytes`` or an image exceeds ``max_image_pixels``."""

    status_code = 413


class UnsupportedMediaType(ServiceError):
    status_code = 415


class QueueFull(ServiceError):
    """A model's batch queue is at ``max_queue_size``: back off and retry."""

    status_code = 429


class ServiceUnavailable(ServiceError):
    """Not ready (models loading) or draining for shutdown."""

    status_code = 503


class DeadlineExceeded(ServiceError):
    """The request could not start inference before its deadline; it was dropped without compute."""

    status_code = 504


class BackendError(ServiceError):
    """Inference failed or returned outputs that break the contract; affects one batch only."""

    status_code = 500


class ClientClosedRequest(ServiceError):
    """The client went away before the response was ready (nginx's 499; nobody receives it)."""

    status_code = 499
