"""Sample capture: the images the served model is unsure about, kept as a COCO dataset (docs/capture.md)."""
