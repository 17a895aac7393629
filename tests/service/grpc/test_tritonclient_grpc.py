"""A real ``detect-serve`` process with ``DETECT_GRPC_PORT`` driven by NVIDIA's ``tritonclient.grpc``:
metadata, config and readiness; inference with the network tensor and with encoded images (raw and typed
contents), equal to /detect's detections; errors with the protocol's status codes and REST's messages;
the gRPC health protocol; the repository extension; metrics.

Loopback only, OS-chosen free ports, a few requests each.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_testkit import GrpcServer
from service_testkit import add_toy_model, encode
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.slow

OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    repo = tmp_path_factory.mktemp("grpc_repo")
    add_toy_model(repo, "toy")
    add_toy_model(repo, "letterbox", height=48, width=64, resize="letterbox")
    add_toy_model(repo, "spare")
    running = GrpcServer(repo, {"DETECT_REPOSITORY_API": "true"})
    try:
        yield running
    finally:
        running.close()


def photo(height: int = 90, width: int = 160) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], axis=-1).astype(np.uint8)


def detect(server: GrpcServer, model: str, png: bytes) -> list[dict[str, object]]:
    response = httpx.post(
        f"{server.url}/detect?model={model}", content=png, headers={"content-type": "image/png"}
    )
    assert response.status_code == 200, response.text
    detections: list[dict[str, object]] = response.json()["detections"]
    return detections


def test_metadata_config_and_readiness(server: GrpcServer) -> None:
    client = server.client()
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("letterbox") and not client.is_model_ready("nope")
    assert client.get_server_metadata(as_json=True)["extensions"] == [
        "binary_tensor_data",
        "model_configuration",
        "model_repository",
    ]
    metadata = client.get_model_metadata("letterbox", as_json=True)
    assert metadata["platform"] == "onnxruntime_onnx" and metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "images", "datatype": "UINT8", "shape": ["-1", "48", "64", "3"]}
    assert [o["name"] for o in metadata["outputs"]] == list(OUTPUTS)
    # The same configuration as REST's /config, field for field.
    config = client.get_model_config("letterbox", as_json=True)["config"]
    rest = httpx.get(f"{server.url}/v2/models/letterbox/config").json()
    assert config["max_batch_size"] == rest["max_batch_size"] == 8
    assert config["input"][0]["dims"] == ["48", "64", "3"] and config["input"][0]["format"] == "FORMAT_NHWC"
    assert config["input"][1] == {
        "name": "image_bytes",
        "data_type": "TYPE_STRING",
        "dims": ["1"],
        "optional": True,
    }
    assert config["parameters"] == rest["parameters"]
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {(m["name"], m["state"]) for m in index} >= {("letterbox", "READY"), ("toy", "READY")}


def test_network_tensor_equals_detect(server: GrpcServer) -> None:
    """UINT8 [2, 64, 64, 3] as raw contents: each image's outputs; /detect agrees on the first."""
    pixels = np.stack([photo(64, 64), np.full((64, 64, 3), 20, np.uint8)])
    images = triton_grpc.InferInput("images", list(pixels.shape), "UINT8")
    images.set_data_from_numpy(pixels)
    result = server.client().infer("toy", [images], request_id="7")
    assert result.get_response().id == "7" and result.get_response().model_version == "1"
    assert result.as_numpy("num_detections").tolist() == [[2], [2]]
    scores = result.as_numpy("detection_scores")
    np.testing.assert_allclose(scores[:, 0], pixels.reshape(2, -1).mean(axis=1) / 255, rtol=1e-5)
    first = detect(server, "toy", encode(pixels[0]))[0]
    assert first["score"] == round(float(scores[0, 0]), 5)
    expected = result.as_numpy("detection_boxes")[0, 0] * 64  # normalized to the input: x 64 = pixels
    box = first["box"]
    assert isinstance(box, dict)
    assert [box[k] for k in ("x1", "y1", "x2", "y2")] == [round(float(v), 2) for v in expected]


def test_encoded_image_equals_detect(server: GrpcServer) -> None:
    """BYTES image_bytes: /detect's detections, boxes in original-image pixels (160 wide, not 64)."""
    png = encode(photo())
    image_bytes = triton_grpc.InferInput("image_bytes", [1, 1], "BYTES")
    image_bytes.set_data_from_numpy(np.array([[png]], dtype=np.object_))
    outputs = [triton_grpc.InferRequestedOutput(name) for name in OUTPUTS]
    result = server.client().infer("letterbox", [image_bytes], outputs=outputs)
    expected = detect(server, "letterbox", png)
    count = int(result.as_numpy("num_detections")[0, 0])
    scores = result.as_numpy("detection_scores")[0, :count]
    kept = [i for i in range(count) if scores[i] >= 0.05]
    assert [round(float(scores[i]), 5) for i in kept] == [d["score"] for d in expected]
    classes = result.as_numpy("detection_classes")[0]
    assert [int(classes[i]) for i in kept] == [d["class_id"] for d in expected]
    boxes = [[round(float(v), 2) for v in result.as_numpy("detection_boxes")[0, i]] for i in kept]
    assert boxes == [[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in expected]  # type: ignore[index]
    assert boxes and max(b[2] for b in boxes) > 64


def typed_request(model: str, tensor: service_pb2.ModelInferRequest.InferInputTensor) -> object:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.append(tensor)
    return request


def test_typed_contents(server: GrpcServer) -> None:
    """The protocol's typed contents (uint_contents, bytes_contents), which tritonclient never sends: the
    same answers as raw contents."""
    pixels = photo(64, 64)
    png = encode(photo())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        uint8 = service_pb2.ModelInferRequest.InferInputTensor(
            name="images", datatype="UINT8", shape=[1, 64, 64, 3]
        )
        uint8.contents.uint_contents.extend(pixels.ravel().tolist())
        typed = stub.ModelInfer(typed_request("toy", uint8), timeout=30)
        encoded = service_pb2.ModelInferRequest.InferInputTensor(
            name="image_bytes", datatype="BYTES", shape=[1]
        )
        encoded.contents.bytes_contents.append(png)
        typed_png = stub.ModelInfer(typed_request("letterbox", encoded), timeout=30)
    scores = np.frombuffer(typed.raw_output_contents[2], dtype="<f4")
    assert [o.name for o in typed.outputs] == list(OUTPUTS)
    assert scores[0] == pytest.approx(pixels.mean() / 255, rel=1e-5)
    count = int(np.frombuffer(typed_png.raw_output_contents[0], dtype="<i4")[0])
    boxes = np.frombuffer(typed_png.raw_output_contents[1], dtype="<f4").reshape(-1, 4)[:count]
    first = detect(server, "letterbox", png)[0]["box"]
    assert isinstance(first, dict)
    assert [round(float(v), 2) for v in boxes[0]] == [first[k] for k in ("x1", "y1", "x2", "y2")]


def grpc_error(call: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()  # type: ignore[operator]
    return caught.value


def rest_error(server: GrpcServer, model: str, tensor: triton_http.InferInput) -> str:
    client = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    with pytest.raises(InferenceServerException) as caught:
        client.infer(model, [tensor])
    return str(caught.value.message())


def test_errors_have_the_protocol_codes_and_rest_messages(server: GrpcServer) -> None:
    client = server.client()
    wrong_shape = np.zeros((1, 32, 32, 3), np.uint8)
    images = triton_grpc.InferInput("images", [1, 32, 32, 3], "UINT8")
    images.set_data_from_numpy(wrong_shape)
    rest_images = triton_http.InferInput("images", [1, 32, 32, 3], "UINT8")
    rest_images.set_data_from_numpy(wrong_shape)
    error = grpc_error(lambda: client.infer("toy", [images]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "[B, 64, 64, 3]" in error.message()
    assert error.message() == rest_error(server, "toy", rest_images)

    floats = triton_grpc.InferInput("images", [1, 64, 64, 3], "FP32")
    floats.set_data_from_numpy(np.zeros((1, 64, 64, 3), np.float32))
    error = grpc_error(lambda: client.infer("toy", [floats]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "datatype 'FP32'" in error.message()

    error = grpc_error(lambda: client.infer("nope", [images]))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == rest_error(server, "nope", rest_images)
    assert "unknown model 'nope'" in error.message()

    error = grpc_error(lambda: client.get_model_metadata("nope"))
    assert error.status() == "StatusCode.NOT_FOUND"

    garbage = triton_grpc.InferInput("image_bytes", [1], "BYTES")
    garbage.set_data_from_numpy(np.array([b"not an image"], dtype=np.object_))
    error = grpc_error(lambda: client.infer("toy", [garbage]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "image_bytes[0]" in error.message()


def test_limits_message_size_and_overload(tmp_path: Path) -> None:
    """A message over DETECT_MAX_BODY_BYTES is refused by gRPC itself (RESOURCE_EXHAUSTED); a request the
    queue cannot take (DETECT_MAX_QUEUE_SIZE) gets RESOURCE_EXHAUSTED with REST's 429 message and its
    retry-after in the trailing metadata."""
    add_toy_model(tmp_path, "toy")
    server = GrpcServer(tmp_path, {"DETECT_MAX_BODY_BYTES": "30000", "DETECT_MAX_QUEUE_SIZE": "1"})
    try:
        three = triton_grpc.InferInput("images", [3, 64, 64, 3], "UINT8")  # 36 KiB
        three.set_data_from_numpy(np.zeros((3, 64, 64, 3), np.uint8))
        error = grpc_error(lambda: server.client().infer("toy", [three]))
        assert error.status() == "StatusCode.RESOURCE_EXHAUSTED" and "30000" in error.message()
        one = triton_grpc.InferInput("images", [1, 64, 64, 3], "UINT8")  # 12 KiB: within both limits
        one.set_data_from_numpy(np.zeros((1, 64, 64, 3), np.uint8))
        assert server.client().infer("toy", [one]).as_numpy("num_detections").tolist() == [[2]]
        two = service_pb2.ModelInferRequest.InferInputTensor(
            name="images", datatype="UINT8", shape=[2, 64, 64, 3]
        )
        request = typed_request("toy", two)
        request.raw_input_contents.append(bytes(2 * 64 * 64 * 3))  # type: ignore[attr-defined]
        with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as caught:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_queue_size 1" in caught.value.details()
        trailing = dict(caught.value.trailing_metadata())
        assert int(trailing["retry-after"]) >= 1
    finally:
        server.close()


def test_health_protocol(server: GrpcServer) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService", "toy"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
        with pytest.raises(grpc.RpcError) as caught:
            health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_repository_load_and_unload(server: GrpcServer) -> None:
    client = server.client()
    assert client.is_model_ready("spare")
    client.unload_model("spare")
    assert not client.is_model_ready("spare")
    images = triton_grpc.InferInput("images", [1, 64, 64, 3], "UINT8")
    images.set_data_from_numpy(np.zeros((1, 64, 64, 3), np.uint8))
    assert grpc_error(lambda: client.infer("spare", [images])).status() == "StatusCode.NOT_FOUND"
    client.load_model("spare")
    assert client.is_model_ready("spare")
    assert client.infer("spare", [images]).as_numpy("num_detections").tolist() == [[2]]
    error = grpc_error(lambda: client.load_model("nope"))
    assert error.status() in ("StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND")


def metric(server: GrpcServer, series: str) -> float:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def test_metrics_count_grpc_calls(server: GrpcServer) -> None:
    """Calls are counted by gRPC code; their images pass through the pipeline's stage metrics."""
    ok, missing = (
        'detect_grpc_requests_total{code="OK",model="toy"}',
        ('detect_grpc_requests_total{code="NOT_FOUND",model="none"}'),
    )
    queue_wait, decode = (
        'detect_queue_wait_seconds_count{model="toy"}',
        'detect_decode_seconds_count{model="toy"}',
    )
    before = {name: metric(server, name) for name in (ok, missing, queue_wait, decode)}
    images = triton_grpc.InferInput("images", [2, 64, 64, 3], "UINT8")
    images.set_data_from_numpy(np.zeros((2, 64, 64, 3), np.uint8))
    server.client().infer("toy", [images])
    encoded = triton_grpc.InferInput("image_bytes", [1], "BYTES")
    encoded.set_data_from_numpy(np.array([encode(photo(64, 64))], dtype=np.object_))
    server.client().infer("toy", [encoded])
    grpc_error(lambda: server.client().infer("nope", [images]))
    after = {name: metric(server, name) for name in before}
    assert {name: after[name] - before[name] for name in before} == {
        ok: 2,
        missing: 1,
        queue_wait: 3,
        decode: 1,
    }


def test_api_keys_and_repository_off(tmp_path: Path) -> None:
    """Keys on: probes open, everything else UNAUTHENTICATED without a key (REST's message), a key in either
    header works. Repository extension off: UNIMPLEMENTED."""
    add_toy_model(tmp_path, "toy")
    server = GrpcServer(tmp_path, {"DETECT_API_KEYS": "k1,k2"})
    try:
        client = server.client()
        assert client.is_server_live() and client.is_server_ready()
        error = grpc_error(lambda: client.get_model_metadata("toy"))
        assert error.status() == "StatusCode.UNAUTHENTICATED"
        rest = httpx.get(f"{server.url}/v2/models/toy").json()["error"]
        assert (
            error.message() == rest == "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
        )
        wrong = grpc_error(lambda: client.get_model_metadata("toy", headers={"x-api-key": "nope"}))
        assert wrong.status() == "StatusCode.UNAUTHENTICATED" and wrong.message().startswith(
            "invalid API key"
        )
        assert client.get_model_metadata("toy", headers={"authorization": "Bearer k1"}).name == "toy"
        images = triton_grpc.InferInput("images", [1, 64, 64, 3], "UINT8")
        images.set_data_from_numpy(np.zeros((1, 64, 64, 3), np.uint8))
        result = client.infer("toy", [images], headers={"x-api-key": "k2"})
        assert result.as_numpy("num_detections").tolist() == [[2]]
        extensions = client.get_server_metadata(headers={"x-api-key": "k2"}).extensions
        assert "model_repository" not in extensions
        error = grpc_error(lambda: client.unload_model("toy", headers={"x-api-key": "k2"}))
        assert error.status() == "StatusCode.UNIMPLEMENTED"
        assert client.is_model_ready("toy", headers={"x-api-key": "k2"})
        with grpc.insecure_channel(server.grpc_url) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.close()


def test_base64_is_not_decoded_for_grpc_bytes(server: GrpcServer) -> None:
    """gRPC BYTES elements are the image's bytes themselves (REST's JSON base64 does not apply)."""
    png = encode(photo(64, 64))
    image_bytes = triton_grpc.InferInput("image_bytes", [1], "BYTES")
    image_bytes.set_data_from_numpy(np.array([base64.b64encode(png)], dtype=np.object_))
    error = grpc_error(lambda: server.client().infer("toy", [image_bytes]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
