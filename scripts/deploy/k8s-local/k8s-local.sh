#!/usr/bin/env bash
# `make k8s-local`: the serving image on a real, single-node Kubernetes 1.20, then the machine put back.
#   build.sh     Kubernetes 1.20 from Debian bookworm's source package (once, cached in $BIN)
#   node.sh      etcd, containerd, control plane, kubelet, kube-proxy; the machine's state recorded
#   deploy.sh    the API server's answer to the CPU overlay, the test-only overlay applied, /detect with and
#                without a key, kubectl exec/logs, a rolling restart under clients
#   teardown.sh  always, even after a failure: processes, mounts, links, iptables, cgroups, kernel settings
# Root on Debian; the image comes from `make image-test`. State in ~/.cache/detect-k8s-local (K8S_LOCAL_STATE).
set -euo pipefail
here="$(dirname "$0")"
source "$here/common.sh"
export CONTAINERS_CONF="${CONTAINERS_CONF:-${IMAGE_TEST_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/detect-image-test}/containers.conf}"
[ "$(id -u)" -eq 0 ] || fail node "needs root (containerd, kubelet, iptables)"
[ -f "$CONTAINERS_CONF" ] || fail image "run make image-test first (it builds the image and configures podman)"

started=$SECONDS
bash "$here/build.sh"
trap 'bash "$here/teardown.sh" || log "teardown left differences (above)"' EXIT
bash "$here/node.sh"
bash "$here/deploy.sh"
cp "$RUN/report.txt" "$K8S_LOCAL_STATE/report.txt"
log "k8s-local passed in $((SECONDS - started)) s; report: $K8S_LOCAL_STATE/report.txt"
