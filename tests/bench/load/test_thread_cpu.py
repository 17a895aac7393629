"""`bench.load.thread_cpu`: each thread's CPU from /proc, py-spy's thread names, and the groups."""

from __future__ import annotations

import os
import threading
import time

from bench.load import thread_cpu

DUMP = """Process 4242: python -m service.cli
Python v3.11.2 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    select (selectors.py:468)
Thread 4250 (active): "detect-worker_0"
    _decode_jpeg (service/imaging/decoding.py:141)
Thread 4251 (idle): "detect-worker_1"
    _worker (concurrent/futures/thread.py:81)
Thread 4260 (active+gil): "infer-m:1-0_0"
    infer (openvino/_ov_api.py:202)
"""


def test_a_dump_names_each_python_thread_by_its_id() -> None:
    assert thread_cpu.parse_dump(4242, DUMP) == {
        (4242, 4242): "MainThread",
        (4242, 4250): "detect-worker_0",
        (4242, 4251): "detect-worker_1",
        (4242, 4260): "infer-m:1-0_0",
    }


def test_threads_are_grouped_by_name_native_ones_and_child_processes_apart() -> None:
    names = thread_cpu.parse_dump(4242, DUMP) | {(5000, 5000): "MainThread"}
    before = {(4242, 4242): 1.0, (4242, 4250): 2.0, (4242, 4251): 2.0, (4242, 4260): 5.0, (4242, 4270): 3.0}
    after = {
        (4242, 4242): 1.5,  # MainThread: 0.5
        (4242, 4250): 2.75,  # the two workers together: 1.0
        (4242, 4251): 2.25,
        (4242, 4260): 7.0,  # inference: 2.0
        (4242, 4270): 4.5,  # a thread Python did not start (the runtime's pool): 1.5
        (4242, 4280): 0.25,  # started during the window
        (5000, 5000): 0.5,  # a child process
        (4242, 4290): 0.0,  # idle: left out
    }
    groups = thread_cpu.by_thread(4242, before, after, names)
    assert groups == {
        "infer-m:1-0": 2.0,
        "native": 1.75,
        "detect-worker": 1.0,
        "MainThread": 0.5,
        "p1:MainThread": 0.5,
    }
    assert list(groups) == sorted(groups, key=lambda name: -groups[name])


def test_a_busy_thread_of_this_process_is_charged_its_cpu() -> None:
    tid: list[int] = []
    spun, release = threading.Event(), threading.Event()

    def spin() -> None:
        tid.append(threading.get_native_id())
        until = time.thread_time() + 0.3
        while time.thread_time() < until:
            pass
        spun.set()
        release.wait(10)

    before = thread_cpu.snapshot(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(10)
        after = thread_cpu.snapshot(os.getpid())
    finally:
        release.set()
        worker.join()
    key = (os.getpid(), tid[0])
    assert key not in before and after[key] >= 0.25  # /proc counts in clock ticks (10 ms)
    assert thread_cpu.by_thread(os.getpid(), before, after, {key: "spinner_0"})["spinner"] >= 0.25
