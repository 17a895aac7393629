"""Peak memory of decoding an Open Inference Protocol request whose images come as JSON integers.

    .venv/bin/python scripts/profiling/measure_v2_json_memory.py [--images 4] [--size 300]

Prints, for a flat and a nested ``data`` list, the JSON size and the peak RSS growth of
`service.v2.tensors.decode_request` per JSON byte: the figure behind `service.v2.infer.JSON_BYTES_PER_BYTE`
(docs/open-inference-protocol.md). Each layout runs in its own process, so one peak does not hide the
other.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys

import numpy as np


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])


def measure(images: int, size: int, nested: bool) -> None:
    from contract.manifest import OUTPUT_NAMES, InputSpec
    from service.v2.tensors import decode_request

    pixels = np.random.default_rng(0).integers(0, 256, (images, size, size, 3), dtype=np.uint8)
    data = pixels.tolist() if nested else pixels.ravel().tolist()
    tensor = {"name": "images", "shape": list(pixels.shape), "datatype": "UINT8", "data": data}
    body = json.dumps({"inputs": [tensor]}).encode()
    del data, tensor
    gc.collect()
    before = rss_kib()
    decode_request(body, None, InputSpec(height=size, width=size), OUTPUT_NAMES, images)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    growth = max(0, peak - before) * 1024
    layout = "nested" if nested else "flat"
    print(
        f"{layout}: JSON {len(body) / 2**20:.1f} MiB, peak RSS growth {growth / 2**20:.0f} MiB, "
        f"{growth / len(body):.1f} bytes per JSON byte"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--layout", choices=["flat", "nested"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.layout:
        measure(args.images, args.size, args.layout == "nested")
        return
    for layout in ("flat", "nested"):
        command = [sys.executable, __file__, "--images", str(args.images), "--size", str(args.size)]
        subprocess.run([*command, "--layout", layout], check=True)


if __name__ == "__main__":
    main()
