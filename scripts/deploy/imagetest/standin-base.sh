#!/usr/bin/env bash
# TEST-ONLY stand-in for the python:3.11-slim base image, for machines that cannot pull from an image
# registry. Never push it, never ship an image built on it: it only lets `make image-test` build the
# unmodified Dockerfile and run the result. It is Debian bookworm's minbase with Python 3.11 (the same
# minor version as python:3.11-slim), venv support, CA certificates, tzdata and netbase, plus the
# /usr/local/bin/python3 path the Dockerfile uses.
#
#   standin-base.sh TAG          e.g. standin-base.sh docker.io/library/python:3.11-slim
#
# Where the host trusts an extra CA (an outbound TLS proxy: /usr/local/share/ca-certificates/*.crt), the
# stand-in trusts it too, and the CA-bundle variables the host sets (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
# PIP_CERT) point at the image's bundle, so pip and uv reach PyPI through that proxy during the build.
# Needs root, mmdebstrap and podman (rootful). The image is labelled io.detect.test-only=true.
set -euo pipefail

tag="${1:?usage: standin-base.sh TAG}"
suite="${STANDIN_SUITE:-bookworm}"
mirror="${STANDIN_MIRROR:-http://deb.debian.org/debian}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

hooks=(
    --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python3"'
    --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"'
)
changes=(
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change 'ENV LANG=C.UTF-8'
    --change 'CMD ["python3"]'
    --change 'LABEL io.detect.test-only=true'
    --change "LABEL io.detect.test-only.recipe=scripts/deploy/imagetest/standin-base.sh ($suite minbase)"
    --change "LABEL io.detect.test-only.recipe-sha256=${STANDIN_RECIPE_SHA256:-unknown}"
)

extra_cas=(/usr/local/share/ca-certificates/*.crt)
if [ -e "${extra_cas[0]}" ]; then
    mkdir -p "$work/ca"
    cp "${extra_cas[@]}" "$work/ca/"
    hooks+=(
        --customize-hook="copy-in $(printf '%q ' "$work"/ca/*.crt)/usr/local/share/ca-certificates/"
        --customize-hook='chroot "$1" update-ca-certificates'
    )
    for name in SSL_CERT_FILE REQUESTS_CA_BUNDLE PIP_CERT; do
        if [ -n "${!name:-}" ]; then
            changes+=(--change "ENV $name=/etc/ssl/certs/ca-certificates.crt")
        fi
    done
fi

mmdebstrap --variant=minbase --mode=root --format=tar \
    --include=python3,python3-venv,python-is-python3,ca-certificates,tzdata,netbase \
    "${hooks[@]}" "$suite" "$work/base.tar" "$mirror"
podman import "${changes[@]}" "$work/base.tar" "$tag"
