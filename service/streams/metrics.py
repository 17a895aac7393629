"""Prometheus metrics of stream sessions, on the app's registry (`service.runtime.metrics.ServiceMetrics`).

Per stream (label ``stream``, the session id; a deleted session's series are removed, so the label set
stays bounded by ``max_streams``): frames read from the source and answered (processed), of those the
detected ones and the predicted ones (answered by the tracker), frames dropped by reason
(``stale``: a newer frame replaced it before it was taken; ``shed``: the batcher refused it (queue full,
or it could not finish within the lag bound behind the queue) or evicted it for an interactive request;
``expired``: it could not start inference within the lag bound; ``unavailable``: the model was not
serving; ``corrupt``: it did not decode), the lag from capture to event (histogram), reconnects, input,
answered, detected, predicted and dropped frames per second, the longest run of predicted frames over
the last 256 answers, the latest motion score, active tracks, and Server-Sent Events a slow client
missed. Sessions by state.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.streams.state import STATES, State

DROP_REASONS = ("stale", "shed", "expired", "unavailable", "corrupt")
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)


class StreamMetrics:
    """The stream families; `forget` removes one session's series."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.input_frames = Counter(
            "detect_stream_input_frames", "Frames decoded from the stream's source", ["stream"], registry=r
        )
        self.processed_frames = Counter(
            "detect_stream_processed_frames",
            "Stream frames answered with an event (detected or predicted)",
            ["stream"],
            registry=r,
        )
        self.detected_frames = Counter(
            "detect_stream_detected_frames", "Stream frames the detector ran on", ["stream"], registry=r
        )
        self.predicted_frames = Counter(
            "detect_stream_predicted_frames",
            "Stream frames answered by the tracker (boxes advanced from the last detection)",
            ["stream"],
            registry=r,
        )
        self.dropped_frames = Counter(
            "detect_stream_dropped_frames",
            "Stream frames dropped before detection, by reason (stale, shed, expired, unavailable, corrupt)",
            ["stream", "reason"],
            registry=r,
        )
        self.lag = Histogram(
            "detect_stream_lag_seconds",
            "From a frame's capture (decoded) to its event",
            ["stream"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.reconnects = Counter(
            "detect_stream_reconnects", "Times the stream's source was reopened", ["stream"], registry=r
        )
        self.input_fps = Gauge(
            "detect_stream_input_fps", "Frames per second decoded from the source", ["stream"], registry=r
        )
        self.processed_fps = Gauge(
            "detect_stream_processed_fps", "Frames per second answered", ["stream"], registry=r
        )
        self.detected_fps = Gauge(
            "detect_stream_detected_fps", "Frames per second detected", ["stream"], registry=r
        )
        self.predicted_fps = Gauge(
            "detect_stream_predicted_fps", "Frames per second answered by the tracker", ["stream"], registry=r
        )
        self.dropped_fps = Gauge(
            "detect_stream_dropped_fps", "Frames per second dropped (any reason)", ["stream"], registry=r
        )
        self.frames_since_detection = Gauge(
            "detect_stream_frames_since_detection",
            "Longest run of predicted frames in the stream's last 256 answers",
            ["stream"],
            registry=r,
        )
        self.motion = Gauge(
            "detect_stream_motion_score",
            "Share of the stream's latest frame that changed (1/8-scale grey image)",
            ["stream"],
            registry=r,
        )
        self.active_tracks = Gauge(
            "detect_stream_active_tracks",
            "Tracks with an id in the stream's latest frame",
            ["stream"],
            registry=r,
        )
        self.events_missed = Counter(
            "detect_stream_events_missed",
            "Server-Sent Events dropped for clients that read too slowly",
            ["stream"],
            registry=r,
        )
        self.sessions = Gauge("detect_streams", "Stream sessions by state", ["state"], registry=r)
        self.budget_fps = Gauge(
            "detect_stream_budget_fps",
            "Stream frames per second the model's detection budget allows (0: not known yet, all detected)",
            ["model"],
            registry=r,
        )
        for state in STATES:
            self.sessions.labels(state).set(0)

    def state_changed(self, old: State | None, new: State) -> None:
        if old is not None:
            self.sessions.labels(old).dec()
        self.sessions.labels(new).inc()

    def forget(self, stream: str) -> None:
        """Remove every series of ``stream`` (a deleted session)."""
        for family in (
            self.input_frames,
            self.processed_frames,
            self.detected_frames,
            self.predicted_frames,
            self.lag,
            self.reconnects,
            self.input_fps,
            self.processed_fps,
            self.detected_fps,
            self.predicted_fps,
            self.dropped_fps,
            self.frames_since_detection,
            self.motion,
            self.active_tracks,
            self.events_missed,
        ):
            with contextlib.suppress(KeyError):
                family.remove(stream)
        for reason in DROP_REASONS:
            with contextlib.suppress(KeyError):
                self.dropped_frames.remove(stream, reason)
