"""The page at / and the API docs: served from this package's files (docs assets vendored), nothing external.

The page itself, driven in a real browser, is tested in test_web_page.py.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from fastapi.testclient import TestClient

from service.http.web import DOCS_ASSETS_DIR, SAMPLES_DIR, STATIC_DIR

ROOT = Path(__file__).resolve().parents[3]
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


def _vendored_assets() -> dict[str, tuple[str, str]]:
    """{file: (license file, sha256)} from the table in docs_assets/README.md."""
    rows = re.findall(
        r"^\| (\S+) \| [^|]+ \| [^|]+ \| [^|]*`(LICENSE\.[\w.-]+)` \| ([0-9a-f]{64}) \|$",
        (DOCS_ASSETS_DIR / "README.md").read_text(),
        re.MULTILINE,
    )
    return {name: (license_file, digest) for name, license_file, digest in rows}


def test_docs_assets_are_the_vendored_bytes_with_their_licenses(client: TestClient) -> None:
    assets = _vendored_assets()
    served = {p.name for p in DOCS_ASSETS_DIR.iterdir() if p.suffix in {".js", ".css", ".png"}}
    assert set(assets) == served, "every asset, and only those, listed in docs_assets/README.md"
    for name, (license_file, digest) in assets.items():
        data = (DOCS_ASSETS_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, f"{name} differs from the vendored bytes"
        assert client.get(f"/static/docs/{name}").content == data
        assert (DOCS_ASSETS_DIR / license_file).stat().st_size > 500, f"{name}: no {license_file}"


def test_docs_assets_are_package_data() -> None:
    """The wheel (and so every image) carries every vendored file: pyproject's package-data covers them."""
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = package_data["service"]
    for file in DOCS_ASSETS_DIR.iterdir():
        relative = file.relative_to(DOCS_ASSETS_DIR.parent).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), f"{relative} not in the wheel"


def test_samples_are_small_jpegs_the_page_offers(client: TestClient) -> None:
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
    readme = (ROOT / "README.md").read_text()
    assert "service/static/samples/shapes-1.jpg" in readme
    assert (SAMPLES_DIR / "shapes-1.jpg").is_file()


def test_docs_off_turns_off_the_docs_but_not_the_page(
    make_client: Callable[..., TestClient], toy_repo: Path
) -> None:
    client = make_client(toy_repo, docs=False)
    for path in ("/docs", "/redoc", "/openapi.json", "/static/docs/swagger-ui.css"):
        assert client.get(path).status_code == 404, path
    assert client.get("/").status_code == 200
