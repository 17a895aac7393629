"""The page at / and the API docs: served from this package's files and fastapi-offline's, nothing external.

The page itself, driven in a real browser, is tested in test_web_page.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from fastapi.testclient import TestClient

from service.http.web import SAMPLES_DIR, STATIC_DIR

EXTERNAL = re.compile(r"https?://", re.IGNORECASE)
REFERENCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
# Swagger UI's and ReDoc's own pages are built by FastAPI around the assets they reference.
DOC_PAGES = ("/docs", "/redoc", "/docs/oauth2-redirect")


def test_the_page_is_served_at_the_root(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js">' in response.text
    for path in ("/static/app.js", "/static/style.css"):
        assert client.get(path).status_code == 200


def test_no_page_references_an_external_url(client: TestClient) -> None:
    pages = {"/": client.get("/").text}
    pages.update({path: client.get(path).text for path in DOC_PAGES})
    for path, text in pages.items():
        references = REFERENCES.findall(text)
        assert path == "/docs/oauth2-redirect" or references, f"{path} references nothing?"
        for reference in references:
            assert reference.startswith(("/", "data:")), f"{path} references {reference!r}"
            if reference.startswith("/"):
                assert client.get(reference).status_code == 200, f"{path}: {reference} is not served"
        # Nor in inline scripts (Swagger UI's configuration: no validator, no CDN).
        assert not EXTERNAL.search(text), f"{path} mentions {EXTERNAL.search(text)}"
    # Every text file of the page, as served (the docs' bundles are third-party code that mentions URLs in
    # strings and comments; the browser test checks that loading the docs fetches nothing from elsewhere).
    for file in STATIC_DIR.rglob("*"):
        if file.suffix in {".html", ".js", ".css"}:
            served = client.get(f"/static/{file.relative_to(STATIC_DIR).as_posix()}")
            assert served.status_code == 200
            assert not EXTERNAL.search(served.text), f"{file.name} mentions {EXTERNAL.search(served.text)}"


def test_pages_allow_loads_from_this_server_only(client: TestClient) -> None:
    for path in ("/", "/docs", "/redoc"):
        policy = client.get(path).headers["content-security-policy"]
        assert "default-src 'self'" in policy and not EXTERNAL.search(policy)


def test_docs_assets_come_from_the_service(client: TestClient) -> None:
    docs = client.get("/docs").text
    assert "/static/docs/swagger-ui-bundle.js" in docs and "/static/docs/swagger-ui.css" in docs
    assert "/static/docs/redoc.standalone.js" in client.get("/redoc").text
    bundle = client.get("/static/docs/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and len(bundle.content) > 100_000  # the real Swagger UI, not a stub


def test_samples_are_small_synthetic_jpegs_the_page_offers(client: TestClient) -> None:
    page = client.get("/").text
    offered = set(re.findall(r'data-src="/static/samples/([^"]+)"', page))
    files = {p.name for p in SAMPLES_DIR.iterdir()}
    assert offered == files and len(files) >= 3
    for name in files:
        data = (SAMPLES_DIR / name).read_bytes()
        assert len(data) < 100_000
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and min(image.shape[:2]) >= 150
        assert client.get(f"/static/samples/{name}").content == data


def test_samples_sit_where_the_readme_says() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    assert "service/static/samples/shapes-1.jpg" in readme
    assert (SAMPLES_DIR / "shapes-1.jpg").is_file()


def test_docs_off_turns_off_the_docs_but_not_the_page(
    make_client: Callable[..., TestClient], toy_repo: Path
) -> None:
    client = make_client(toy_repo, docs=False)
    for path in ("/docs", "/redoc", "/openapi.json", "/static/docs/swagger-ui.css"):
        assert client.get(path).status_code == 404, path
    assert client.get("/").status_code == 200
