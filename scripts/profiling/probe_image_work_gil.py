"""What one image's decode and resize cost in a thread, alone and beside a thread that runs Python.

    .venv/bin/python scripts/profiling/probe_image_work_gil.py models/efficientdet-d0-synth-int8/1 \
        [--image service/static/samples/shapes-1.jpg] [--images 200] [--switch-ms 5 1 0.5 0.1]

The work is the service's own (`plan_decode`, `decode_planned`, `resize_for_network` with the manifest's
input spec). Each line gives its wall time and CPU time per image in a worker thread, first alone, then
while another thread of the same process runs pure Python (as the event loop does while it parses,
routes and answers requests), at each interpreter switch interval (`sys.setswitchinterval`). OpenCV
releases the interpreter lock inside each call, so every call's return waits for the lock; beside a
thread that holds it, that wait is up to one switch interval. The service's image work therefore
takes longer in a busy server than its CPU time says (docs/benchmarks/request-path.md, "Decoding on the
inference thread").
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from contract.geometry import network_content_size, resize_for_network
from contract.manifest import Manifest
from service.imaging.decoding import decode_planned, plan_decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir", type=Path, help="a model version folder (its manifest.json is read)")
    parser.add_argument("--image", type=Path, default=Path("service/static/samples/shapes-1.jpg"))
    parser.add_argument("--images", type=int, default=200, help="images per measurement")
    parser.add_argument("--switch-ms", type=float, nargs="+", default=[5.0, 1.0, 0.5, 0.1])
    args = parser.parse_args(argv)

    spec = Manifest.model_validate_json((args.model_dir / "manifest.json").read_text()).input
    data = args.image.read_bytes()

    def one() -> None:
        plan = plan_decode(data, max_pixels=1 << 30, reduce_to=lambda size: network_content_size(spec, size))
        resize_for_network(decode_planned(data, plan), spec, plan.original_size)

    def measure(busy: bool) -> tuple[float, float]:
        stop = threading.Event()

        def python_loop() -> None:
            total = 0
            while not stop.is_set():
                for i in range(1000):
                    total += i

        result: list[tuple[float, float]] = []

        def work() -> None:
            started, cpu = time.perf_counter(), time.thread_time()
            for _ in range(args.images):
                one()
            result.append((time.perf_counter() - started, time.thread_time() - cpu))

        other = threading.Thread(target=python_loop) if busy else None
        if other is not None:
            other.start()
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        stop.set()
        if other is not None:
            other.join()
        wall, cpu = result[0]
        return wall / args.images * 1e3, cpu / args.images * 1e3

    one()  # first call: imports and allocations
    wall, cpu = measure(busy=False)
    print(f"{'alone':38s}  wall {wall:6.2f} ms  cpu {cpu:5.2f} ms per image")
    for switch_ms in args.switch_ms:
        sys.setswitchinterval(switch_ms / 1000)
        wall, cpu = measure(busy=True)
        label = f"beside a Python thread, switch {switch_ms:4.1f} ms"
        print(f"{label}  wall {wall:6.2f} ms  cpu {cpu:5.2f} ms per image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
