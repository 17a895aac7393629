"""``detect-predict SOURCE``: detections for a folder of images or a video file, from a local artifact or a
running server, written as COCO results / NDJSON, optionally drawn (`cli`)."""
