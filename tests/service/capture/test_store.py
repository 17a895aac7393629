"""The capture folder: valid COCO (read by pycocotools), quota, recovery, a writer killed mid-write."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from capture_testkit import check_consistent, jpeg, record
from pycocotools.coco import COCO

from service.capture.store import ANNOTATIONS, IMAGES, RECORDS, CaptureStore, QuotaExceeded, image_suffix


def test_written_dataset_is_coco_that_pycocotools_reads(tmp_path: Path) -> None:
    store = CaptureStore(tmp_path, max_bytes=1 << 30)
    store.open()
    for reason in ("score_band", "few_detections", "random"):
        store.write(jpeg(), record(store.next_name(), reason))
    store.publish()
    coco = COCO(str(tmp_path / ANNOTATIONS))
    assert len(coco.getImgIds()) == 3
    assert sorted(coco.getCatIds()) == [1, 2]
    anns = coco.loadAnns(coco.getAnnIds(imgIds=[1]))
    assert [a["score"] for a in anns] == [0.45, 0.2]
    assert all(a["prediction"] is True and a["model"] == "toy" and a["version"] == "1" for a in anns)
    assert anns[0]["capture_reason"] == "score_band" and anns[0]["area"] == pytest.approx(120.0)
    for image in coco.loadImgs(coco.getImgIds()):
        assert (tmp_path / IMAGES / image["file_name"]).read_bytes() == jpeg()
    # The results API takes the predictions as detections: they are scored COCO annotations.
    results = coco.loadRes([{k: a[k] for k in ("image_id", "category_id", "bbox", "score")} for a in anns])
    assert len(results.getAnnIds()) == 2
    assert store.counts() == (3, {"score_band": 1, "few_detections": 1, "random": 1})


def test_quota_is_never_exceeded(tmp_path: Path) -> None:
    one = len(jpeg()) + len(record("00000000000000000000-000001").to_json())
    store = CaptureStore(tmp_path, max_bytes=3 * one + one // 2)
    store.open()
    for _ in range(3):
        store.write(jpeg(), record(store.next_name()))
    with pytest.raises(QuotaExceeded):
        store.write(jpeg(), record(store.next_name()))
    assert store.counts()[0] == 3
    on_disk = sum(p.stat().st_size for p in (tmp_path / IMAGES).iterdir())
    on_disk += sum(p.stat().st_size for p in (tmp_path / RECORDS).iterdir())
    assert on_disk == store.used_bytes <= store.max_bytes


def test_open_removes_what_a_crash_left_and_counts_what_is_kept(tmp_path: Path) -> None:
    store = CaptureStore(tmp_path, max_bytes=1 << 30)
    store.open()
    store.write(jpeg(), record(store.next_name(), "random"))
    (tmp_path / IMAGES / ".tmp-half").write_bytes(b"\xff\xd8 half")
    (tmp_path / IMAGES / "99999999999999999999-000001.jpg").write_bytes(jpeg())  # no record: an orphan
    (tmp_path / RECORDS / ".tmp-x").write_bytes(b'{"name":')
    again = CaptureStore(tmp_path, max_bytes=1 << 30)
    again.open()
    assert sorted(p.name for p in (tmp_path / IMAGES).iterdir()) == [store.coco()["images"][0]["file_name"]]
    assert not list((tmp_path / RECORDS).glob(".tmp-*"))
    assert again.counts() == (1, {"random": 1}) and again.used_bytes == store.used_bytes
    assert len(json.loads((tmp_path / ANNOTATIONS).read_bytes())["images"]) == 1  # republished


def test_archive_holds_the_coco_file_and_its_images(tmp_path: Path) -> None:
    store = CaptureStore(tmp_path / "c", max_bytes=1 << 30)
    store.open()
    for _ in range(2):
        store.write(jpeg(), record(store.next_name()))
    tar_path = tmp_path / "captures.tar"
    tar_path.write_bytes(b"".join(store.archive()))
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "out", filter="data")
    assert names[0] == ANNOTATIONS and len(names) == 3
    assert len(COCO(str(tmp_path / "out" / ANNOTATIONS)).getImgIds()) == 2


def test_image_suffix_from_magic_bytes() -> None:
    assert image_suffix(jpeg()) == ".jpg"
    assert image_suffix(b"\x89PNG\r\n\x1a\n....") == ".png"
    assert image_suffix(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == ".webp"
    assert image_suffix(b"nothing known") == ".img"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_writer_killed_mid_write_leaves_no_half_written_file(tmp_path: Path, seed: int) -> None:
    """SIGKILL a process writing captures at a random moment: a reader sees whole files only, and the next
    open makes the folder consistent (the COCO file names exactly the records)."""
    script = Path(__file__).with_name("crash_writer.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script.parent.parent), os.getcwd()])}
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(random.Random(seed).uniform(0.2, 1.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    written = len(list((tmp_path / RECORDS).glob("*.json")))
    assert written > 0, "the writer was killed before it wrote anything: the test checked nothing"
    check_consistent(tmp_path)  # what a reader sees right after the crash
    store = CaptureStore(tmp_path, max_bytes=1 << 40)
    store.open()
    assert check_consistent(tmp_path) == store.counts()[0] == len(list((tmp_path / RECORDS).glob("*.json")))
    assert not [p for p in (tmp_path / IMAGES).iterdir() if p.name.startswith(".tmp-")]
