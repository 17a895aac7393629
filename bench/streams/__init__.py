"""Camera streams (``detect-bench streams``): synthetic MJPEG / video sources, N cameras against
detect-serve, and the stream scheduler replayed on a simulated clock. Imports no torch."""
