"""The OpenAPI document is valid for schema tools, and the server answers as it says.

Fast checks read the document of an app built in-process. The slow one runs schemathesis, with all of its
checks and every phase (examples, coverage, fuzzing, stateful), against real ``detect-serve`` processes on
127.0.0.1 serving a toy repository, and fails on any finding: a schema error, a failed check, or a warning
that points at the document. Its runs are bounded and repeatable (few examples per operation,
deterministic generation, one worker).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from service_testkit import Server, add_toy_model, make_settings

from service.app import create_app

MakeClient = Callable[..., TestClient]
KEY = "openapi-test-key"
METHODS = ("get", "put", "post", "delete", "patch")
SCHEMATHESIS_TIMEOUT_S = 150

# Rules a JSON Schema cannot state, so a schema-valid request may still get 400 from these operations:
# /detect's class names and image bytes are checked against the model's labels and by the decoders; an
# inference request's tensor name, shape and data against the model's signature; a load needs a folder
# of that name holding a valid model, and so does a rollout's candidate. Their 400 bodies are still checked
# against the document.
MODEL_DEPENDENT_400 = """
[[operations]]
include-path-regex = "^(/v1)?/detect$|/infer$|^/v2/repository/models/[^/]+/(load|rollout)$"
checks.positive_data_acceptance.expected-statuses = [
  "2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "400",
]

# A stream's URL must start with an allowed prefix (403 otherwise) and be rtsp(s) or http(s) (400): no
# generated URL is allowed, so no session is opened (and none of its endless event streams is read).
[[operations]]
include-path = "/v1/streams"
checks.positive_data_acceptance.expected-statuses = [
  "2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "400",
]
"""

# Warnings that say the document is wrong or unusable. Left out, as they depend on the data drawn, not on
# the document: missing_test_data, validation_mismatch and low_valid_rate (the 400s above).
DOCUMENT_WARNINGS = [
    "missing_auth",
    "base_url_mismatch",
    "missing_deserializer",
    "unused_openapi_auth",
    "unsupported_regex",
    "method_not_allowed",
    "constants_extraction",
    "unmatched_filter",
    "unresolvable_reference",
    "dictionary_mismatch",
]

# Identifiers that exist on the toy server, drawn for half of the values of these parameters (the other
# half is generated, so unknown names are exercised too).
COMMON_CONFIG = f"""
[warnings]
fail-on = {DOCUMENT_WARNINGS!r}

[dictionaries.models]
values = ["toy"]

[dictionaries.versions]
values = ["1"]

[parameters]
"path.model_name" = {{ dictionary = "models", probability = 0.5 }}
"path.model_version" = {{ dictionary = "versions", probability = 0.5 }}
"path.name" = {{ dictionary = "models", probability = 0.5 }}
"query.model" = {{ dictionary = "models", probability = 0.5 }}
"query.version" = {{ dictionary = "versions", probability = 0.5 }}
{MODEL_DEPENDENT_400}
"""

# With the repository extension on, the run itself unloads and reloads ``toy``; while none is loaded the
# readiness probes give their documented "not ready" answers (503 native, 400 for the protocol's). These
# answers are allowed here only; the default run, whose model always serves, holds them to 200.
KEYS_AND_REPOSITORY_CONFIG = f"""
[auth.openapi.bearer]
bearer = "{KEY}"

[auth.openapi.apiKey]
api_key = "{KEY}"

[[operations]]
include-path = "/health/ready"
checks.not_a_server_error.expected-statuses = ["1xx", "2xx", "3xx", "4xx", "503"]

[[operations]]
include-path = "/v2/health/ready"
checks.positive_data_acceptance.expected-statuses = [
  "2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "400",
]
"""

SETUPS: dict[str, tuple[dict[str, str], str]] = {
    # The default deployment: no API keys, no repository extension.
    "default": ({}, ""),
    # Keys on (every operation but the probes needs one: `ignored_auth` resends without it) and the
    # repository extension's index, load and unload, which change what the server serves.
    "keys-and-repository": (
        {"DETECT_API_KEYS": KEY, "DETECT_REPOSITORY_API": "true"},
        KEYS_AND_REPOSITORY_CONFIG,
    ),
}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def test_every_path_parameter_is_declared(toy_repo: Path) -> None:
    app = create_app(make_settings(toy_repo, repository_api=True, api_keys=KEY))
    document = app.openapi()
    checked = 0
    for path, method, operation in operations(document):
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), f"{method.upper()} {path}"
        checked += bool(declared)
    assert checked >= 11  # /v1/models/{name}, /v2/models/... (8), repository load and unload


@pytest.mark.parametrize("overrides", [{}, {"repository_api": True, "api_keys": KEY}], ids=["default", "all"])
def test_validation_errors_are_documented_as_the_error_body_sent(
    toy_repo: Path, overrides: dict[str, object]
) -> None:
    document = create_app(make_settings(toy_repo, **overrides)).openapi()
    assert "HTTPValidationError" not in json.dumps(document)
    answering_422 = [op["responses"]["422"] for _, _, op in operations(document) if "422" in op["responses"]]
    assert len(answering_422) >= 10
    for response in answering_422:
        assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}


def test_request_bodies_are_declared_as_required_where_the_server_needs_one(toy_repo: Path) -> None:
    document = create_app(make_settings(toy_repo, repository_api=True)).openapi()
    bodies = {(path, method): op.get("requestBody") for path, method, op in operations(document)}
    detect = bodies[("/detect", "post")]
    assert detect is not None and detect["required"] is True
    assert {"multipart/form-data", "image/jpeg", "image/png", "application/octet-stream"} <= set(
        detect["content"]
    )
    for path in ("/v2/models/{model_name}/infer", "/v2/models/{model_name}/versions/{model_version}/infer"):
        infer = bodies[(path, "post")]
        assert infer is not None and infer["required"] is True
        assert set(infer["content"]) == {"application/json", "application/octet-stream"}
        assert "$ref" not in str(infer)  # nested models are written in place
    for path in ("/v2/repository/index", "/v2/repository/models/{model_name}/load"):
        optional = bodies[(path, "post")]
        assert optional is not None and optional["required"] is False  # an empty body means the defaults


@pytest.mark.parametrize("classes", ["", " ", ",", " , ,"])
def test_a_class_filter_naming_no_class_is_refused_as_the_document_says(
    client: TestClient, png_of: Callable[[int], bytes], classes: str
) -> None:
    document = client.get("/openapi.json").json()
    (parameter,) = [p for p in document["paths"]["/detect"]["post"]["parameters"] if p["name"] == "classes"]
    (string,) = [s for s in parameter["schema"]["anyOf"] if s.get("type") == "string"]
    assert re.search(string["pattern"], classes) is None  # the document refuses it
    assert re.search(string["pattern"], "cat, 2") is not None
    response = client.post(
        "/detect", params={"classes": classes}, content=png_of(200), headers={"content-type": "image/png"}
    )
    assert response.status_code == 400 and response.json()["field"] == "classes"


def test_api_keys_are_declared_and_probes_stay_open(toy_repo: Path) -> None:
    document = create_app(make_settings(toy_repo, api_keys=KEY)).openapi()
    assert set(document["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert document["security"] == [{"bearer": []}, {"apiKey": []}]
    for path, method, operation in operations(document):
        if path.startswith(("/health/", "/v2/health/")):
            assert operation["security"] == [], path
        else:
            assert "security" not in operation, path  # the document's: a key
            assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }, f"{method.upper()} {path}"
    assert document == create_app(make_settings(toy_repo, api_keys=KEY)).openapi()  # stable
    open_document = create_app(make_settings(toy_repo)).openapi()
    assert "securitySchemes" not in open_document["components"] and "security" not in open_document


def schemathesis_command() -> list[str]:
    script = Path(sys.executable).with_name("schemathesis")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()"]


@pytest.mark.slow
@pytest.mark.parametrize("setup", list(SETUPS))
def test_schemathesis_finds_nothing(tmp_path: Path, setup: str) -> None:
    env, extra_config = SETUPS[setup]
    repo = tmp_path / "repo"
    add_toy_model(repo, "toy")
    config = tmp_path / "schemathesis.toml"
    config.write_text(COMMON_CONFIG + extra_config)
    server = Server(
        repo,
        {
            "DETECT_INTRA_OP_THREADS": "1",
            "DETECT_WORKER_THREADS": "2",
            "DETECT_ACCESS_LOG": "false",
            # Stream sessions on (off, every /v1/streams operation answers 403), allowing no real source.
            "DETECT_STREAM_SOURCES": "http://127.0.0.1:9/",
            **env,
        },
    )
    try:
        with httpx.Client(base_url=server.url, timeout=10, headers={"x-api-key": KEY}) as http:
            server.wait_until(lambda: http.get("/health/ready").status_code == 200, "readiness")
            count = len(operations(http.get("/openapi.json").json()))
        started = time.monotonic()
        run = subprocess.run(
            [
                *schemathesis_command(),
                "--config-file",
                str(config),
                "--no-color",
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                "10",
                "--generation-deterministic",  # the same cases every run, and no example database
                "--workers",
                "1",
                "--request-timeout",
                "20",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=SCHEMATHESIS_TIMEOUT_S,
            check=False,
        )
        elapsed = time.monotonic() - started
        assert run.returncode == 0, (
            f"schemathesis ({setup}, {elapsed:.0f}s) exited {run.returncode}:\n{run.stdout}\n{run.stderr}\n"
            f"--- server log ---\n{server.full_log()[-4000:]}"
        )
        # Every operation of the document was selected and tested: none is left out.
        assert re.search(rf"Selected:\s+{count}/{count}\b", run.stdout), run.stdout
        assert re.search(rf"Tested:\s+{count}\b", run.stdout), run.stdout
    finally:
        server.close()
