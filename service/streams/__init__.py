"""Camera and stream sessions: `POST /v1/streams` (docs/streams.md)."""
