#!/usr/bin/env bash
# System packages the tests use but pip cannot provide. Idempotent: installs only what is missing.
#
#   promtool (Debian package `prometheus`): tests/service/test_metrics.py runs `promtool check metrics`
#   on the service's /metrics output; the test skips with a stated reason when promtool is absent.
#   chromium + chromedriver (Debian packages `chromium`, `chromium-driver`): tests/service/test_web_page.py
#   drives the service's web page in a headless browser (selenium); it skips with a stated reason when
#   either is absent.
#   wrk (Debian package `wrk`): `detect-bench http --client wrk`, a C load client whose own CPU is small next
#   to the server's; tests/service/bench/test_load_clients.py skips its wrk run when it is absent.
#
# Installs only as root (CI images, containers); otherwise it prints what to install and exits 0 so
# `make setup` still works for an unprivileged developer.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)

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
