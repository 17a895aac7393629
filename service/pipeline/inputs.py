"""What the pipeline takes in: encoded images as already read by a protocol (HTTP body, tensor, frame)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ImageUpload:
    """One encoded image; ``label`` is how errors name it (``images[1]``, ``body``, ``image_bytes[0]``).

    ``data`` is dropped (`discard`) once the image is decoded, so the bytes do not outlive their use.
    """

    label: str
    data: bytes | bytearray
    filename: str | None = None

    def discard(self) -> None:
        self.data = b""
