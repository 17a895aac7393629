"""How often OpenVINO compiles a graph with ROIAlign so that it fails, per compile setting, the runtime alone.

    .venv/bin/python scripts/profiling/probe_roi_align_streams.py models/maskrcnn-synth-int8/1 \\
        [--compiles 12] [--image service/static/samples/shapes-1.jpg]

Each setting is compiled ``--compiles`` times, each compile in a fresh process (the first compile in a
process fails most often), and each compiled graph runs one image on each of its infer requests (one per
stream). A compile counts as failed when any of its runs raises; the script prints the failed compiles per
setting and the first error. The settings: two streams on a static batch-1 graph (what
``DETECT_OPENVINO_STREAMS=2`` compiled before ROIAlign graphs were kept dynamic), two streams on the dynamic
graph, and one stream on a static batch-1 graph (the solo graph's setting). docs/cpu-inference.md, "Static
batch shapes", has the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SETTINGS = {
    "2 streams, static batch 1": ({"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": 2}, True),
    "2 streams, dynamic batch": ({"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": 2}, False),
    "1 stream, static batch 1": ({"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}, True),
}


def compile_and_run(version_dir: Path, image: Path, setting: str) -> str:
    """One compile of ``setting`` in this process: "ok", or the first error's message."""
    import cv2
    import numpy as np

    from contract.manifest import Manifest
    from service.runtime.backends.machine import openvino_core, openvino_cpu_capabilities
    from service.runtime.backends.openvino_backend import hint_for_cpu, read_with_batch_size

    manifest = Manifest.read(version_dir)
    config, static = SETTINGS[setting]
    hint = hint_for_cpu(manifest, "manifest", list(openvino_cpu_capabilities()))
    config = {**config, "INFERENCE_PRECISION_HINT": hint}
    core = openvino_core()
    path = version_dir / manifest.file
    model = read_with_batch_size(core, path, 1) if static else core.read_model(str(path))
    compiled = core.compile_model(model, "CPU", config)
    size = (manifest.input.width, manifest.input.height)
    decoded = cv2.imread(str(image))
    if decoded is None:
        raise SystemExit(f"{image}: not an image OpenCV reads")
    pixels = cv2.resize(decoded[:, :, ::-1], size)[None]
    streams = int(compiled.get_property("NUM_STREAMS"))
    for request in [compiled.create_infer_request() for _ in range(streams)]:
        try:
            request.infer({0: np.ascontiguousarray(pixels)})
        except RuntimeError as exc:
            return " ".join(str(exc).split())[-160:]
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version_dir", type=Path)
    parser.add_argument("--compiles", type=int, default=12)
    parser.add_argument("--image", type=Path, default=Path("service/static/samples/shapes-1.jpg"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(compile_and_run(args.version_dir, args.image, args.child)))
        return
    for setting in SETTINGS:
        failed, first = 0, ""
        for _ in range(args.compiles):
            command = [sys.executable, __file__, str(args.version_dir), "--image", str(args.image)]
            command += ["--child", setting]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            outcome = json.loads(done.stdout.strip().splitlines()[-1])
            if outcome != "ok":
                failed += 1
                first = first or outcome
        example = f" ({first})" if first else ""
        print(f"{setting}: {failed} of {args.compiles} compiles failed{example}", flush=True)


if __name__ == "__main__":
    main()
