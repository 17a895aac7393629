"""A real ``detect-serve`` process driven by NVIDIA's own client, ``tritonclient.http``: metadata,
config and inference in JSON and binary mode, answers equal to /detect's, and a model version swapped
under steady load without a failed or lost request.

Loopback only, free ports, bounded request counts and durations.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from service_testkit import Server, add_toy_model, encode

pytestmark = pytest.mark.slow

ENV = {
    "DETECT_INTRA_OP_THREADS": "1",
    "DETECT_ACCESS_LOG": "false",
    "DETECT_MAX_QUEUE_DELAY_MS": "2",
    "DETECT_REPOSITORY_API": "true",
}


def start(repo: Path) -> Server:
    server = Server(repo, ENV)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        server.wait_until(lambda: client.get("/v2/health/ready").status_code == 200, "readiness")
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("triton_repo")
    add_toy_model(repo, "toy")
    add_toy_model(repo, "letterbox", height=48, width=64, resize="letterbox")
    running = start(repo)
    try:
        yield running
    finally:
        running.close()


def client_for(server: Server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=30)


def photo(height: int = 90, width: int = 160) -> np.ndarray:
    """A test image with structure (so the letterbox geometry and the score both depend on it)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], axis=-1).astype(np.uint8)


def test_metadata_and_config(server: Server) -> None:
    client = client_for(server)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("letterbox") and not client.is_model_ready("nope")
    assert client.get_server_metadata()["extensions"] == [
        "binary_tensor_data",
        "model_configuration",
        "model_repository",
    ]
    metadata = client.get_model_metadata("letterbox")
    assert metadata["inputs"][0] == {"name": "images", "datatype": "UINT8", "shape": [-1, 48, 64, 3]}
    assert [o["name"] for o in metadata["outputs"]] == [
        "num_detections",
        "detection_boxes",
        "detection_scores",
        "detection_classes",
    ]
    config = client.get_model_config("letterbox")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [48, 64, 3]
    index = client.get_model_repository_index()
    assert {(m["name"], m["state"]) for m in index} == {("letterbox", "READY"), ("toy", "READY")}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_encoded_image_equals_detect(server: Server, binary: bool) -> None:
    """BYTES in (binary, or base64 strings in JSON): the same detections /detect gives for the image."""
    png = encode(photo())
    element = png if binary else __import__("base64").b64encode(png).decode()
    image_bytes = triton.InferInput("image_bytes", [1, 1], "BYTES")
    image_bytes.set_data_from_numpy(np.array([[element]], dtype=np.object_), binary_data=binary)
    outputs = [
        triton.InferRequestedOutput(name, binary_data=binary)
        for name in ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
    ]
    result = client_for(server).infer("letterbox", [image_bytes], outputs=outputs, request_id="42")
    assert result.get_response()["id"] == "42"
    detect = httpx.post(
        f"{server.url}/detect?model=letterbox", content=png, headers={"content-type": "image/png"}
    ).json()
    count = int(result.as_numpy("num_detections")[0, 0])
    scores = result.as_numpy("detection_scores")[0, :count]
    kept = [i for i in range(count) if scores[i] >= 0.05]
    assert [round(float(scores[i]), 5) for i in kept] == [d["score"] for d in detect["detections"]]
    assert [int(result.as_numpy("detection_classes")[0, i]) for i in kept] == [
        d["class_id"] for d in detect["detections"]
    ]
    boxes = [[round(float(v), 2) for v in result.as_numpy("detection_boxes")[0, i]] for i in kept]
    assert boxes == [[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in detect["detections"]]
    assert boxes and max(b[2] for b in boxes) > 64  # original pixels (160 wide), not the 64-wide input


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_network_tensor(server: Server, binary: bool) -> None:
    """UINT8 [B, 64, 64, 3] in: the toy model's answers for each image of the batch; /detect agrees."""
    pixels = np.stack([photo(64, 64), np.full((64, 64, 3), 20, np.uint8)])
    images = triton.InferInput("images", list(pixels.shape), "UINT8")
    images.set_data_from_numpy(pixels, binary_data=binary)
    result = client_for(server).infer("toy", [images])  # no outputs named: all, in binary
    assert result.as_numpy("num_detections").tolist() == [[2], [2]]
    scores = result.as_numpy("detection_scores")
    np.testing.assert_allclose(scores[:, 0], pixels.reshape(2, -1).mean(axis=1) / 255, rtol=1e-5)
    detect = httpx.post(
        f"{server.url}/detect?model=toy", content=encode(pixels[0]), headers={"content-type": "image/png"}
    ).json()
    assert detect["detections"][0]["score"] == round(float(scores[0, 0]), 5)
    box = detect["detections"][0]["box"]
    expected = result.as_numpy("detection_boxes")[0, 0] * 64  # normalized to the input: x 64 = pixels
    assert [box[k] for k in ("x1", "y1", "x2", "y2")] == [round(float(v), 2) for v in expected]


def test_errors_reach_the_client(server: Server) -> None:
    client = client_for(server)
    wrong = triton.InferInput("images", [1, 32, 32, 3], "UINT8")
    wrong.set_data_from_numpy(np.zeros((1, 32, 32, 3), np.uint8))
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("toy", [wrong])
    assert caught.value.status() == "400" and "[B, 64, 64, 3]" in caught.value.message()
    with pytest.raises(triton.InferenceServerException) as caught:
        client.infer("nope", [wrong])
    assert caught.value.status() == "404"


def test_version_swap_under_steady_load(tmp_path: Path) -> None:
    """Four clients (/detect and the protocol, alternately) send requests back to back while version 2
    is loaded; every request is answered 200, none is lost, and requests sent after the load answered
    get version 2."""
    add_toy_model(tmp_path, "toy", "1")
    server = start(tmp_path)
    png = encode(photo(64, 64))
    sent: Counter[str] = Counter()
    answers: list[tuple[float, int, str]] = []  # (sent at, status, version)
    lock = threading.Lock()
    stop = threading.Event()
    max_requests = 400

    def native(http: httpx.Client) -> tuple[int, str]:
        response = http.post("/detect", content=png, headers={"content-type": "image/png"})
        return response.status_code, response.json().get("version", "")

    def protocol(client: triton.InferenceServerClient) -> tuple[int, str]:
        image_bytes = triton.InferInput("image_bytes", [1], "BYTES")
        image_bytes.set_data_from_numpy(np.array([png], dtype=np.object_))
        try:
            result = client.infer("toy", [image_bytes])
        except triton.InferenceServerException as exc:
            return int(exc.status() or 0), ""
        return 200, result.get_response()["model_version"]

    def load(worker: int) -> None:
        http = httpx.Client(base_url=server.url, timeout=30)
        client = client_for(server)
        try:
            while not stop.is_set():
                with lock:
                    if sum(sent.values()) >= max_requests:
                        return
                    sent["native" if worker % 2 else "protocol"] += 1
                at = time.monotonic()
                status, version = native(http) if worker % 2 else protocol(client)
                with lock:
                    answers.append((at, status, version))
        finally:
            http.close()
            client.close()

    threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        add_toy_model(tmp_path, "toy", "2")
        loaded = httpx.post(f"{server.url}/v2/repository/models/toy/load", timeout=60)
        switched_at = time.monotonic()
        assert loaded.status_code == 200, loaded.text
        time.sleep(1.0)
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop.set()
        server.close()
    statuses = Counter(status for _, status, _ in answers)
    versions = Counter(version for _, _, version in answers)
    print(f"sent {dict(sent)}; answered {dict(statuses)}; versions {dict(versions)}")
    assert len(answers) == sum(sent.values()), "every request sent was answered"
    assert statuses == Counter({200: len(answers)}), statuses
    assert versions["1"] > 0 and versions["2"] > 0
    assert all(version == "2" for at, _, version in answers if at > switched_at)
