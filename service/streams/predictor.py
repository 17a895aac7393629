"""What a stream session needs of its tracker: the frames it detects update it, the others it answers
with the live tracks advanced to their time. `service.video.prediction.TrackPredictor` is the one the
app gives (`service.app`); sessions know it only by this interface, as streams and video are separate
rooms.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from service.imaging.postprocess import KeptDetections


class Carried(Protocol):
    """A frame between detections (`service.video.prediction.Predicted`)."""

    @property
    def track_ids(self) -> np.ndarray: ...
    @property
    def frames_since_detection(self) -> int: ...
    def as_detections(self) -> KeptDetections: ...


class FramePredictor(Protocol):
    """A session's tracker that answers every frame (`service.video.prediction.TrackPredictor`):
    positions are frame times in frames at the session's fps."""

    @property
    def frames_since_detection(self) -> int: ...
    @property
    def live_tracks(self) -> int: ...
    @property
    def new_tracks(self) -> int: ...
    def drift(self, position: float) -> float: ...
    def detected(self, position: float, detections: KeptDetections) -> np.ndarray: ...
    def predicted(self, position: float, size: tuple[int, int] | None = None) -> Carried: ...
    def reset(self) -> None: ...


class PredictorFactory(Protocol):
    def __call__(self, fps: float, max_predicted_frames: int) -> FramePredictor: ...
