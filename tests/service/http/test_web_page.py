"""The page at /, in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by selenium)
against a real `detect-serve` on 127.0.0.1: what it draws equals what the API answers.

The browser and its driver come from scripts/dev/install-system-deps.sh (as root); without them these tests
skip and say so. Screenshots are saved under the test's tmp_path.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np
import pytest
from pycocotools import mask as mask_utils
from service_testkit import PROJECT, Server, add_toy_model, encode

from bench.streams.sources import SourceServer, synthetic_frames
from service.http.web import SAMPLES_DIR

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs chromium and chromium-driver (Debian packages; scripts/dev/install-system-deps.sh installs "
    "them when run as root)",
)
SAMPLE = "shapes-1.jpg"
REAL_PHOTO_MODEL = "ssd-mobilenetv2-oidv4"
WAIT_S = 30


@pytest.fixture(scope="module")
def cameras() -> Iterator[SourceServer]:
    """Synthetic MJPEG cameras on 127.0.0.1 for the video tab (small and slow: the page, not the load)."""
    with SourceServer(fps=5, width=320, height=240, cycle=10) as source:
        yield source


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, cameras: SourceServer) -> Iterator[Server]:
    """The committed default model beside a toy mask model, the default declared by the repository;
    stream sessions may open the test's cameras."""
    repo = tmp_path_factory.mktemp("web_repo")
    (repo / "ssd300-synth").symlink_to(PROJECT / "models" / "ssd300-synth")
    (repo / REAL_PHOTO_MODEL).symlink_to(PROJECT / "models" / REAL_PHOTO_MODEL)
    add_toy_model(repo, "toy-masks", mask_size=(8, 8))
    (repo / "default").write_text("ssd300-synth\n")
    env = {
        "DETECT_INTRA_OP_THREADS": "1",
        "DETECT_WORKER_THREADS": "2",
        "DETECT_STREAM_SOURCES": cameras.base_url,
    }
    server = Server(repo, env)
    try:
        server.wait_until(
            lambda: httpx.get(f"{server.url}/health/ready", timeout=5).status_code == 200, "readiness"
        )
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(browser: Any, script: str, what: str) -> Any:
    """Poll a JavaScript expression until it is truthy; its value."""
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.05).until(
        lambda driver: driver.execute_script(f"return {script}"), message=f"waiting for {what}"
    )


def drawn(browser: Any) -> list[dict[str, Any]]:
    assert browser.execute_script("return document.getElementById('canvas').dataset.state") == "done"
    return json.loads(browser.execute_script("return document.getElementById('canvas').dataset.drawn"))


def api_detections(
    server: Server, model: str, sample: str = SAMPLE, **params: str | float
) -> list[dict[str, Any]]:
    response = httpx.post(
        f"{server.url}/detect",
        params={"model": model, **params},
        content=(SAMPLES_DIR / sample).read_bytes(),
        headers={"content-type": "image/jpeg"},
        timeout=WAIT_S,
    )
    assert response.status_code == 200, response.text
    return response.json()["detections"]


def as_drawn(detections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("class_id", "category_id", "label", "score", "box")
    return [{key: d.get(key) for key in keys} for d in detections]


def open_page_and_run_sample(browser: Any, server: Server, model: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    browser.get(f"{server.url}/")
    wait_for(browser, "document.getElementById('model').options.length > 0", "the model list")
    Select(browser.find_element(By.ID, "model")).select_by_value(model)
    browser.find_element(By.CSS_SELECTOR, f'.sample[data-src="/static/samples/{SAMPLE}"]').click()
    wait_for(browser, "document.getElementById('canvas').dataset.state === 'done'", "the detections drawn")


def test_a_real_photo_sample_selects_the_model_that_knows_it(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    """The synthetic model is selected; the astronaut's sample switches to the real-photo model, whose person
    is drawn as the API answers it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    browser.get(f"{server.url}/")
    wait_for(browser, "document.getElementById('model').options.length > 0", "the model list")
    Select(browser.find_element(By.ID, "model")).select_by_value("ssd300-synth")
    browser.find_element(By.CSS_SELECTOR, '.sample[data-src="/static/samples/astronaut.jpg"]').click()
    wait_for(browser, "document.getElementById('canvas').dataset.state === 'done'", "the detections drawn")
    assert browser.find_element(By.ID, "model").get_attribute("value") == REAL_PHOTO_MODEL
    shown = drawn(browser)
    assert [d["label"] for d in shown] == ["Person"]
    assert shown == as_drawn(api_detections(server, REAL_PHOTO_MODEL, "astronaut.jpg"))
    browser.save_screenshot(str(tmp_path / "page-astronaut.png"))


def set_threshold(browser: Any, value: float) -> None:
    browser.execute_script(
        "const s = document.getElementById('threshold'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('input'));",
        str(value),
    )


def test_page_draws_the_apis_detections_and_filters_without_resending(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    open_page_and_run_sample(browser, server, "ssd300-synth")
    # The slider starts at the model's default threshold: what a request without score_threshold gets.
    threshold = float(browser.find_element(By.ID, "threshold").get_attribute("value"))
    shown = drawn(browser)
    assert shown and shown == as_drawn(api_detections(server, "ssd300-synth"))
    assert shown == as_drawn(api_detections(server, "ssd300-synth", score_threshold=threshold))
    browser.save_screenshot(str(tmp_path / "page-default-threshold.png"))

    # The best box is really on the canvas: its left edge, half-way down, has its class's colour.
    best = max(shown, key=lambda d: d["score"])
    # The stroke is at least 2 px wide, centred on x1: this pixel lies wholly inside it.
    x, y = math.ceil(best["box"]["x1"] - 1), int((best["box"]["y1"] + best["box"]["y2"]) / 2)
    pixel = browser.execute_script(
        "return Array.from(document.getElementById('canvas').getContext('2d')"
        ".getImageData(arguments[0], arguments[1], 1, 1).data)",
        x,
        y,
    )
    colour = browser.execute_script("return PALETTE[arguments[0] % PALETTE.length]", best["class_id"])
    assert pixel[:3] == colour

    # Another threshold, then a class filter: re-filtered in the page, equal to the API's answer, and no
    # new request. The other threshold lets the best hidden box in (slider steps are 0.01).
    everything = as_drawn(api_detections(server, "ssd300-synth", score_threshold=0.05))
    other = math.floor(max(d["score"] for d in everything if d["score"] < threshold) * 100) / 100
    set_threshold(browser, other)
    refiltered = drawn(browser)
    assert refiltered == as_drawn(api_detections(server, "ssd300-synth", score_threshold=other))
    assert len(refiltered) != len(shown)
    browser.save_screenshot(str(tmp_path / f"page-threshold-{other}.png"))
    first_class = browser.find_element(By.CSS_SELECTOR, "#classes input")
    dropped = int(first_class.get_attribute("value"))
    first_class.click()
    kept = [d for d in refiltered if d["class_id"] != dropped]
    categories = sorted({d["category_id"] for d in kept})
    assert drawn(browser) == kept
    assert kept == as_drawn(
        api_detections(
            server, "ssd300-synth", score_threshold=other, classes=",".join(str(c) for c in categories)
        )
    )
    assert browser.execute_script("return window.detectPage.requests") == 1
    rows = browser.find_elements(By.CSS_SELECTOR, "#detections tbody tr")
    assert len(rows) == len(kept)
    stages = [r.text.split()[0] for r in browser.find_elements(By.CSS_SELECTOR, "#timings tbody tr")]
    assert stages[:6] == ["decode", "preprocess", "queue_wait", "inference", "postprocess", "encode"]


def test_page_decodes_masks_from_the_apis_rle(browser: Any, server: Server, tmp_path: Path) -> None:
    open_page_and_run_sample(browser, server, "toy-masks")
    shown = drawn(browser)
    api = api_detections(server, "toy-masks")
    assert shown and [{k: v for k, v in d.items() if k != "mask_area"} for d in shown] == as_drawn(api)
    for page_detection, detection in zip(shown, api, strict=True):
        rle = {"size": detection["mask"]["size"], "counts": detection["mask"]["counts"].encode()}
        assert page_detection["mask_area"] == int(mask_utils.area(rle)) > 0
    browser.save_screenshot(str(tmp_path / "page-masks.png"))


def test_page_sends_a_chosen_file_and_shows_the_apis_error(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/")
    wait_for(browser, "document.getElementById('model').options.length > 0", "the model list")
    png = tmp_path / "mine.png"  # the user's own file, in another format than the samples
    png.write_bytes(encode(cv2.cvtColor(cv2.imread(str(SAMPLES_DIR / SAMPLE)), cv2.COLOR_BGR2RGB), ".png"))
    browser.find_element(By.ID, "file").send_keys(str(png))
    wait_for(browser, "document.getElementById('canvas').dataset.state === 'done'", "the detections drawn")
    api = httpx.post(
        f"{server.url}/detect",
        content=png.read_bytes(),
        headers={"content-type": "image/png"},
        timeout=WAIT_S,
    )
    assert drawn(browser) == as_drawn(api.json()["detections"])

    broken = tmp_path / "broken.png"
    broken.write_bytes(png.read_bytes()[: len(png.read_bytes()) // 2])
    browser.find_element(By.ID, "file").send_keys(str(broken))
    wait_for(browser, "document.getElementById('canvas').dataset.state === 'error'", "the error shown")
    status = browser.find_element(By.ID, "status")
    assert status.text.startswith("400: ") and "error" in status.get_attribute("class")


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        ("/", "document.getElementById('model').options.length > 0"),
        ("/docs", "document.querySelector('.swagger-ui .opblock') !== null"),
        ("/redoc", "document.querySelector('.api-content h2') !== null"),
    ],
)
def test_pages_load_nothing_from_elsewhere(
    browser: Any, server: Server, path: str, rendered: str, tmp_path: Path
) -> None:
    browser.get_log("browser")  # drop earlier pages' messages
    browser.get(f"{server.url}{path}")
    wait_for(browser, rendered, f"{path} rendered")
    attempted = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".concat(performance.getEntriesByType('navigation').map(e => e.name))"
    )
    refused = " ".join(
        e["message"] for e in browser.get_log("browser") if "Content Security Policy" in e["message"]
    )
    external = [url for url in attempted if not url.startswith(f"{server.url}/")]
    # ReDoc's bundle asks for its logo from cdn.redoc.ly; the page's Content-Security-Policy refuses it.
    assert all(url in refused for url in external), (external, refused)
    assert path == "/redoc" or not external
    browser.save_screenshot(str(tmp_path / "page.png"))


def test_page_tiles_on_request_and_draws_the_grid(browser: Any, server: Server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    browser.get(f"{server.url}/")
    wait_for(browser, "document.getElementById('model').options.length > 0", "the model list")
    sample = cv2.cvtColor(cv2.imread(str(SAMPLES_DIR / SAMPLE)), cv2.COLOR_BGR2RGB)
    big = tmp_path / "big.png"  # four samples side by side: a larger scene than the network's input
    big.write_bytes(encode(np.tile(sample, (2, 2, 1)), ".png"))
    Select(browser.find_element(By.ID, "tiling")).select_by_value("512x512")
    browser.find_element(By.ID, "file").send_keys(str(big))
    state = "document.getElementById('canvas').dataset.state"
    wait_for(browser, f"['done', 'error'].includes({state})", "the answer")
    assert browser.execute_script(f"return {state}") == "done", browser.find_element(By.ID, "status").text
    result = browser.execute_script("return window.detectPage.result")
    threshold = httpx.get(f"{server.url}/v1/models/ssd300-synth", timeout=WAIT_S).json()["score_threshold"]
    api = httpx.post(
        f"{server.url}/detect",
        params={"model": "ssd300-synth", "tiling": "512x512", "score_threshold": threshold},
        content=big.read_bytes(),
        headers={"content-type": "image/png"},
        timeout=WAIT_S,
    ).json()
    assert len(result["tiles"]) > 1 and result["tiles"] == api["tiles"]
    assert result["detections"] == api["detections"]
    first = result["tiles"][0]  # a pixel on its right edge, inside the image
    x, y = round(first["x2"]) - 1, round(first["y1"]) + 40
    pixel = f"document.getElementById('canvas').getContext('2d').getImageData({x}, {y}, 1, 1).data"
    before = browser.execute_script(f"return Array.from({pixel})")[:3]
    browser.find_element(By.ID, "tile-grid").click()
    # The grid is white, drawn over the image: that pixel brightens in every channel.
    brighter = " && ".join(f"Array.from({pixel})[{c}] > {before[c] + 15}" for c in range(3))
    wait_for(browser, brighter, "the tile grid drawn")


def test_video_tab_shows_a_streams_frames_with_track_ids_live(
    browser: Any, server: Server, cameras: SourceServer, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    created = httpx.post(f"{server.url}/v1/streams", json={"url": cameras.url("mjpeg/page"), "fps": 5})
    assert created.status_code == 201, created.text
    stream_id = created.json()["id"]
    try:
        browser.get(f"{server.url}/")
        browser.find_element(By.ID, "tab-video").click()
        assert browser.find_element(By.ID, "image-tab").get_attribute("hidden") is not None
        wait_for(browser, "window.detectVideo.events >= 4 && window.detectVideo.snapshots >= 1", "frames")
        assert browser.execute_script("return window.detectVideo.stream") == stream_id
        # One script sees the event and the table together (the page fills the table as it takes the event).
        event, rows = browser.execute_script(
            "return [window.detectVideo.lastEvent, [...document.querySelectorAll('#tracks tbody tr')]"
            ".map((row) => [...row.cells].map((cell) => cell.textContent))]"
        )
        expected = [
            [str(d["track_id"]) if d["track_id"] is not None else "-", d["label"], f"{d['score']:.2f}"]
            for d in event["detections"]
        ]
        assert [row[:3] for row in rows] == expected
        assert event["width"] == 320 and event["height"] == 240 and event["detections"]
        # The sample shapes are found with high scores: tracked, with ids, after the first frames.
        assert any(d["track_id"] is not None for d in event["detections"])
        size = browser.execute_script(
            "const i = document.getElementById('snapshot'); return [i.naturalWidth, i.naturalHeight]"
        )
        assert size == [320, 240]
        assert "running" in browser.find_element(By.ID, "stream-info").text
        browser.save_screenshot(str(tmp_path / "page-video-tab.png"))
    finally:
        assert httpx.delete(f"{server.url}/v1/streams/{stream_id}").status_code == 204


def webm_clip(path: Path, frames: int = 8) -> Path:
    """A VP9 WebM of the moving sample shapes (a codec every Chromium plays)."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libvpx-vp9", rate=5)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for image in synthetic_frames(320, 240, frames):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode(None))
    return path


def clip_on_the_page(
    browser: Any, server: Server, clip: Path, detect_every: int = 1
) -> tuple[list[Any], Any]:
    """The clip's NDJSON answer from the API, and what the video tab shows after uploading it (with its
    "Detect every" control at ``detect_every``)."""
    from selenium.webdriver.common.by import By

    query = f"?detect_every={detect_every}" if detect_every > 1 else ""
    answer = httpx.post(
        f"{server.url}/detect{query}",
        content=clip.read_bytes(),
        headers={"content-type": "video/webm"},
        timeout=WAIT_S,
    )
    assert answer.status_code == 200, answer.text
    lines = [json.loads(line) for line in answer.text.splitlines()]
    browser.get(f"{server.url}/")
    wait_for(browser, "document.getElementById('model').options.length > 0", "the model list")
    browser.find_element(By.ID, "tab-video").click()
    if detect_every > 1:
        every = browser.find_element(By.ID, "clip-detect-every")
        every.clear()
        every.send_keys(str(detect_every))
    browser.find_element(By.ID, "clip").send_keys(str(clip))
    wait_for(browser, "window.detectVideo.clip && window.detectVideo.clip.done", "the clip's answer")
    return lines, browser.execute_script("return window.detectVideo.clip")


def test_video_tab_shows_an_uploaded_clips_frames_with_track_ids(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    lines, shown = clip_on_the_page(browser, server, webm_clip(tmp_path / "shapes.webm"))
    assert shown["error"] is None
    assert shown["frames"] == lines[:-1] and shown["summary"] == lines[-1]
    assert lines[-1]["tracks"] >= 1  # the shapes are tracked
    # Step to the processed frame at 1 s: its boxes are drawn (over the clip when the browser plays it; this
    # headless Chromium refuses blob media, so on a blank frame) and its detections listed.
    browser.execute_script(
        "const s = document.getElementById('clip-frame'); s.value = '5'; s.dispatchEvent(new Event('input'));"
    )
    wait_for(browser, "window.detectVideo.clipShownFrame === 5", "the boxes of the frame at 1 s")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#tracks tbody tr')]"
        ".map((row) => [...row.cells].map((cell) => cell.textContent))"
    )
    at_one_second = next(f for f in lines[:-1] if f["frame"] == 5)
    assert [row[1] for row in rows] == [d["label"] for d in at_one_second["detections"]]
    assert [row[0] for row in rows] == [str(d.get("track_id", "-")) for d in at_one_second["detections"]]
    overlay = browser.execute_script(
        "const c = document.getElementById('clip-overlay');"
        "const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "let n = 0; for (let i = 3; i < px.length; i += 4) n += px[i] > 0; return [c.width, n];"
    )
    assert overlay[0] > 0 and overlay[1] > 0  # boxes drawn
    browser.save_screenshot(str(tmp_path / "page-video-clip.png"))


def test_video_tab_sends_detect_every_and_shows_the_predicted_frames(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    lines, shown = clip_on_the_page(browser, server, webm_clip(tmp_path / "shapes.webm"), detect_every=3)
    assert {line["source"] for line in lines[:-1]} == {"detected", "predicted"}
    assert shown["error"] is None
    assert shown["frames"] == lines[:-1] and shown["summary"] == lines[-1]
    browser.save_screenshot(str(tmp_path / "page-video-detect-every.png"))
