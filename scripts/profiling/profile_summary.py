"""Where a server's sampled time goes: a summary of ``py-spy record --format raw`` output.

    py-spy record --pid PID --native --format raw --rate 200 --duration 15 -o prof.txt &
    wrk -t1 -c1 -d15s -s post.lua http://127.0.0.1:8000          # the load, meanwhile
    .venv/bin/python scripts/profiling/profile_summary.py prof.txt

Samples whose innermost frames wait (a lock, a queue, the selector) are idle and left out; of the rest,
inference (OpenVINO's or ONNX Runtime's run call) is one line and every other sample is charged to the
source file of its innermost Python frame, then to that frame's function.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

IDLE = (
    "PyThread_acquire_lock_timed",
    "EpollSelector.select",
    "_queue_SimpleQueue_get",
    "pthread_cond_timedwait",
    "Condition.wait",
)
INFERENCE = ("InferRequest.infer", "InferenceSession.run")
PYTHON_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*\.py):\d+\)$")


def summarize(lines: list[str], top: int) -> list[str]:
    by_file: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    total = idle = 0
    for line in lines:
        if not line.strip():
            continue
        stack, count_text = line.rsplit(" ", 1)
        count = int(count_text)
        total += count
        frames = stack.split(";")
        if any(word in frame for frame in frames[-4:] for word in IDLE):
            idle += count
            continue
        if any(word in stack for word in INFERENCE):
            by_file["(inference)"] += count
            continue
        python = [m for m in map(PYTHON_FRAME.match, frames) if m is not None]
        if not python:
            by_file["(native, no Python frame)"] += count
            continue
        file = re.sub(r".*site-packages/", "", python[-1]["file"])
        by_file[file] += count
        by_function[f"{python[-1]['function']}  {file}"] += count
    active = max(total - idle, 1)
    out = [f"{total} samples, {idle} idle, {total - idle} active; shares of the active ones:"]
    out += [f"  {n / active * 100:5.1f}%  {name}" for name, n in by_file.most_common(top)]
    out.append("innermost Python function:")
    out += [f"  {n / active * 100:5.1f}%  {name}" for name, n in by_function.most_common(top)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    print("\n".join(summarize(args.profile.read_text().splitlines(), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
