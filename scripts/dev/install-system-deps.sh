#!/usr/bin/env bash
# System packages the tests use but pip cannot provide. Idempotent: installs only what is missing.
#
#   promtool (Debian package `prometheus`): tests/service/test_metrics.py runs `promtool check metrics`
#   on the service's /metrics output; the test skips with a stated reason when promtool is absent.
#   chromium + chromedriver (Debian packages `chromium`, `chromium-driver`): tests/service/test_web_page.py
#   drives the service's web page in a headless browser (selenium); it skips with a stated reason when
#   either is absent.
#   wrk (Debian package `wrk`): `detect-bench http --client wrk`, a C load client whose own CPU is small next
#   to the server's; tests/bench/load/test_load_clients.py skips its wrk run when it is absent.
#   GStreamer's RTSP server for the system Python (Debian packages `python3-gi`, `gir1.2-gst-rtsp-server-1.0`,
#   `gstreamer1.0-plugins-base` (videotestsrc, videoconvert), `gstreamer1.0-plugins-good` (jpegenc, RTP
#   payloaders), `gstreamer1.0-plugins-ugly` (x264enc)): tests/service/streams/test_rtsp.py starts
#   tests/service/streams/rtsp_server.py with /usr/bin/python3 as a live RTSP camera on 127.0.0.1; it
#   skips with a stated reason when the probe below fails, and skips only its H.264 case without x264enc.
#
# Installs only as root (CI images, containers); otherwise it prints what to install and exits 0 so
# `make setup` still works for an unprivileged developer.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
gst_has() {  # gst_has MODULE-OR-ELEMENT...: the system Python has the GStreamer RTSP server and these elements
    /usr/bin/python3 -c "
import sys, gi
gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0')
from gi.repository import Gst, GstRtspServer
Gst.init(None)
sys.exit(any(Gst.ElementFactory.find(e) is None for e in sys.argv[1:]))" "$@" >/dev/null 2>&1
}
gst_has || missing+=(python3-gi gir1.2-gst-rtsp-server-1.0)
gst_has videotestsrc videoconvert || missing+=(gstreamer1.0-plugins-base)
gst_has jpegenc rtpjpegpay rtph264pay || missing+=(gstreamer1.0-plugins-good)
gst_has x264enc || missing+=(gstreamer1.0-plugins-ugly)

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-system-deps: not root; to enable the skipped checks run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: apt-get not found; install ${missing[*]} with your package manager" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
