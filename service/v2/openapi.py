"""How the Open Inference Protocol's routes describe themselves in the OpenAPI document.

The routes read their path parameters from ``request.path_params`` and their bodies as raw bytes (JSON or
the binary tensor data extension), so FastAPI cannot infer either: the path parameters are declared by
decorator-level dependencies (`MODEL_PATH`, `VERSION_PATH`, `REPOSITORY_MODEL_PATH`) and the bodies by
``openapi_extra``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path
from fastapi.params import Depends as DependsParam
from pydantic import BaseModel

from service.v2.schemas import InferRequest, InferResponse
from service.v2.tensors import HEADER_LENGTH

ModelName = Annotated[str, Path(description="the model's name (a folder of the model repository)")]
ModelVersion = Annotated[
    str, Path(description="one of the model's versions (default: its latest loaded one)")
]


# What load and unload accept (`service.runtime.repository.check_model_name`; other names are refused with
# 400): one folder name, no "..". Documented only, so the check and its message stay the repository's.
RepositoryModelName = Annotated[
    str,
    Path(
        description="a folder of the model repository",
        json_schema_extra={"pattern": r"^[A-Za-z0-9](?:\.?[A-Za-z0-9_-])*\.?$", "maxLength": 128},
    ),
]


async def _model_path(model_name: ModelName) -> None:
    """Declares ``{model_name}`` (the routes read it from the request's path parameters)."""


async def _version_path(model_name: ModelName, model_version: ModelVersion) -> None:
    """Declares ``{model_name}`` and ``{model_version}``."""


async def _repository_model_path(model_name: RepositoryModelName) -> None:
    """Declares the ``{model_name}`` of the repository extension's load and unload."""


# ``dependencies=`` of the routes under /v2/models/{model_name}, .../versions/{model_version} and
# /v2/repository/models/{model_name}.
MODEL_PATH: list[DependsParam] = [Depends(_model_path)]
VERSION_PATH: list[DependsParam] = [Depends(_version_path)]
REPOSITORY_MODEL_PATH: list[DependsParam] = [Depends(_repository_model_path)]


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its nested models written in place (no ``$ref``), for ``openapi_extra``
    (whose schemas are not added to the document's components)."""
    schema = model.model_json_schema()
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(definitions[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


def optional_json_body(model: type[BaseModel], *, required: bool = False) -> dict[str, Any]:
    """``openapi_extra`` for a JSON body read by hand: optional (an empty body stands for ``model``'s
    defaults) unless ``required``."""
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }


_BINARY = {"type": "string", "format": "binary"}

INFER_REQUEST_BODY: dict[str, Any] = {
    "parameters": [
        {
            "name": HEADER_LENGTH,
            "in": "header",
            "required": False,
            "description": "binary tensor data extension: the length of the body's JSON part (without it "
            "the whole body is the JSON request)",
            "schema": {"type": "integer", "minimum": 0},
        }
    ],
    "requestBody": {
        "required": True,
        "description": "The inference request: JSON tensors, or (binary tensor data extension) the JSON "
        f"request followed by the raw tensors it sizes, with its length in `{HEADER_LENGTH}`. Any "
        "Content-Type is read this way (clients such as tritonclient send none).",
        "content": {
            "application/json": {"schema": inline_schema(InferRequest)},
            "application/octet-stream": {"schema": _BINARY},
        },
    },
}

INFER_OK: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The requested outputs: JSON, or the JSON followed by the binary outputs (their "
        f"JSON part's length in `{HEADER_LENGTH}`)",
        "model": InferResponse,
        "content": {"application/octet-stream": {"schema": _BINARY}},
        "headers": {
            HEADER_LENGTH: {
                "description": "binary responses: the length of the JSON part",
                "schema": {"type": "integer", "minimum": 0},
            }
        },
    }
}
