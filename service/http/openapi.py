"""What the OpenAPI document says beyond what FastAPI derives from the routes.

- FastAPI documents a 422 ``HTTPValidationError`` for every operation with parameters that does not
  document its own 422; this service answers validation errors with `ErrorBody`
  (`service.http.error_responses`), so the document says that instead.
- With API keys configured (`service.http.auth`), the document declares both ways to send a key as security
  schemes, requires one on every operation except the open probes, and documents those operations' 401.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI

from service.http.auth import OPEN_PATHS, OPEN_PREFIXES
from service.schemas import ErrorBody

SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "`X-API-Key: <key>`"},
}
ERROR_BODY_REF = "#/components/schemas/ErrorBody"
_ERROR_CONTENT: dict[str, Any] = {"application/json": {"schema": {"$ref": ERROR_BODY_REF}}}
_FASTAPI_VALIDATION_ERROR = "#/components/schemas/HTTPValidationError"
_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def _operations(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, operation)
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if method in _METHODS
    ]


def _add_error_body(schema: dict[str, Any]) -> None:
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}"))


def document_validation_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Document 422 as the `ErrorBody` the service sends, not FastAPI's ``HTTPValidationError`` (in place)."""
    for _, operation in _operations(schema):
        response = operation.get("responses", {}).get("422")
        content = (response or {}).get("content", {}).get("application/json", {})
        if content.get("schema") == {"$ref": _FASTAPI_VALIDATION_ERROR}:
            operation["responses"]["422"] = {"description": "invalid parameter", "content": _ERROR_CONTENT}
            _add_error_body(schema)
    schemas = schema.get("components", {}).get("schemas", {})
    if _FASTAPI_VALIDATION_ERROR not in json.dumps(schema):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)  # only HTTPValidationError refers to it
    return schema


def document_api_keys(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the API key requirement to the OpenAPI ``schema`` (in place)."""
    schema.setdefault("components", {}).setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    _add_error_body(schema)
    schema["security"] = [{name: []} for name in SECURITY_SCHEMES]  # either one
    for path, operation in _operations(schema):
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            operation["security"] = []
        else:
            operation.setdefault("responses", {}).setdefault(
                "401",
                {
                    "description": "missing or invalid API key (with `WWW-Authenticate`)",
                    "content": _ERROR_CONTENT,
                },
            )
    return schema


def install_openapi(app: FastAPI, *, api_keys: bool) -> None:
    """Make ``app``'s OpenAPI document say what this module adds (both steps change nothing when repeated
    on FastAPI's cached document)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = document_validation_errors(generate())
        return document_api_keys(schema) if api_keys else schema

    app.openapi = openapi  # type: ignore[method-assign]
