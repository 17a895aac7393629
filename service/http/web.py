"""The browser side of the service: the page at ``/`` and the API docs, with no asset from elsewhere.

``/`` is ``service/static/index.html`` (its script and style beside it, sample images in
``static/samples/``), served under ``/static``. ``/docs`` (Swagger UI) and ``/redoc`` load their
scripts from ``service/docs_assets/`` (vendored, their versions, licenses and sha256 in its README.md),
served under ``/static/docs``, so both work on a machine without internet access.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
SAMPLES_DIR = STATIC_DIR / "samples"
# Outside STATIC_DIR, so that docs=False serves none of it.
DOCS_ASSETS_DIR = Path(__file__).resolve().parent.parent / "docs_assets"
DOCS_ASSETS = "/static/docs"
R = TypeVar("R", bound=Response)
# The pages may load only from this server: the browser itself refuses anything else (ReDoc's bundle, for
# one, would fetch its logo from a CDN). Swagger UI starts from an inline script; both inline styles.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; worker-src 'self' blob:; connect-src 'self'"
)


def _self_only(response: R) -> R:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


def install_web(app: FastAPI, *, docs: bool) -> None:
    """Add ``/`` and ``/static``; with ``docs``, ``/docs`` and ``/redoc`` on locally served assets.

    Create ``app`` with ``docs_url=None, redoc_url=None`` (FastAPI's own pages load from a CDN).
    """

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return _self_only(FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"}))

    if docs:
        # Mounted before /static so the more specific prefix wins.
        app.mount(DOCS_ASSETS, StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")
        openapi_url = app.openapi_url or "/openapi.json"

        @app.get("/docs", include_in_schema=False)
        async def swagger_ui() -> HTMLResponse:
            return _self_only(
                get_swagger_ui_html(
                    openapi_url=openapi_url,
                    title=f"{app.title} - Swagger UI",
                    swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                    swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                    swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                    oauth2_redirect_url="/docs/oauth2-redirect",
                    swagger_ui_parameters={"validatorUrl": None},  # no call to swagger.io's validator
                )
            )

        @app.get("/docs/oauth2-redirect", include_in_schema=False)
        async def swagger_ui_redirect() -> HTMLResponse:
            return get_swagger_ui_oauth2_redirect_html()

        @app.get("/redoc", include_in_schema=False)
        async def redoc() -> HTMLResponse:
            return _self_only(
                get_redoc_html(
                    openapi_url=openapi_url,
                    title=f"{app.title} - ReDoc",
                    redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                    redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                    with_google_fonts=False,
                )
            )

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
