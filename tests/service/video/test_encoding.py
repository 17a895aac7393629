"""The boxed MP4: written in fragments as frames come, decodable, of the frames given."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from video_testkit import frame_image

from service.video.encoding import Mp4Writer


def test_fragments_come_while_writing_and_the_file_decodes() -> None:
    chunks = []
    with Mp4Writer(65, 49, fps=5) as mp4:  # odd sides lose a column and a row
        for index in range(12):
            mp4.add(frame_image(65, 49, index)[..., ::-1])
            chunks.append(mp4.take())
    chunks.append(mp4.take())
    assert sum(1 for chunk in chunks[:-1] if chunk) >= 2  # a fragment a second, not all at the end
    with av.open(io.BytesIO(b"".join(chunks))) as video:
        frames = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    assert len(frames) == 12 and frames[0].shape == (48, 64, 3)
    assert np.abs(frames[5].astype(int) - frame_image(65, 49, 5)[:48, :64]).mean() < 8


def test_bad_sizes_and_use_after_close() -> None:
    with pytest.raises(ValueError, match="too small"):
        Mp4Writer(1, 1, 10)
    mp4 = Mp4Writer(16, 16, 10)
    mp4.close()
    mp4.close()
    with pytest.raises(ValueError, match="closed"):
        mp4.add(np.zeros((16, 16, 3), np.uint8))
