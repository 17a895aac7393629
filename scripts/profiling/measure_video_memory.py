"""Peak memory of one video's decoding (and, with ``--mp4``, drawing + encoding) against the working set a
video request holds in the image budget (`service.video.job.working_set`; docs/video.md).

Run it once per case: the video is made by a child process, so this process's peak RSS is the decoder's.

    .venv/bin/python scripts/profiling/measure_video_memory.py --size 1920x1080
    .venv/bin/python scripts/profiling/measure_video_memory.py --size 1920x1080 --mp4
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from service.imaging.postprocess import KeptDetections
from service.imaging.render import draw_detections
from service.video.decoding import VideoLimits, open_video
from service.video.encoding import Mp4Writer
from service.video.job import working_set

MAKE = """
import sys
sys.path.insert(0, "tests/service")
from video_testkit import make_video
width, height, frames, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
open(path, "wb").write(make_video(width=width, height=height, frames=frames, fps=30, background=120))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="1920x1080")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=4, help="video_frames_in_flight")
    parser.add_argument("--mp4", action="store_true", help="also draw and encode each frame")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "video.mp4"
        subprocess.run(
            [sys.executable, "-c", MAKE, str(width), str(height), str(args.frames), str(path)], check=True
        )
        data = path.read_bytes()
    gc.collect()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    empty = KeptDetections(
        np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(0)
    )
    group: list[np.ndarray] = []
    mp4 = Mp4Writer(width, height, 30) if args.mp4 else None
    with open_video(data, VideoLimits(width * height, 10**6, 1e9)) as video:
        for frame in video.frames():
            group.append(frame.image)  # two groups in flight: one decoding, one in the model
            if len(group) == 2 * args.in_flight:
                group = []
            if mp4 is not None:
                mp4.add(draw_detections(frame.image, empty, ()))
                mp4.take()
    if mp4 is not None:
        mp4.close()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    bound = working_set(width * height, args.in_flight, "mp4" if args.mp4 else "ndjson")
    print(
        json.dumps(
            {
                "size": args.size,
                "mp4": args.mp4,
                "rss_growth_mib": round(grown / 2**20, 1),
                "working_set_mib": round(bound / 2**20, 1),
                "within": grown <= bound,
            }
        )
    )


if __name__ == "__main__":
    main()
