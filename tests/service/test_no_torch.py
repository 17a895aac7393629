"""The service never imports torch (nor the training package): it must run in an image without them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys

    import cv2
    import numpy as np
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(model_repository=sys.argv[1], intra_op_threads=1, inter_op_threads=1))
    with TestClient(app) as client:
        client.portal.call(app.state.runtime.wait_loaded)
        ok, png = cv2.imencode(".png", np.full((64, 64, 3), 200, np.uint8))
        response = client.post("/detect", content=png.tobytes(), headers={"content-type": "image/png"})
        assert response.status_code == 200, response.text
        assert response.json()["detections"], response.text
        assert client.get("/metrics").status_code == 200
    roots = ("torch", "torchvision", "training", "onnx")
    forbidden = sorted(m for m in sys.modules if m.split(".")[0] in roots)
    print("FORBIDDEN", forbidden)
    """
)


def test_serving_a_request_imports_no_torch(toy_repo: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(toy_repo)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr
    assert "FORBIDDEN []" in result.stdout, result.stdout
