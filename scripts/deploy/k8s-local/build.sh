#!/usr/bin/env bash
# Builds Kubernetes 1.20 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
# kubectl) from Debian bookworm's `kubernetes` source package with Debian's Go, and the pause binary from
# its build/pause, into $BIN. Once: a rerun finds the binaries and returns at once.
set -euo pipefail
source "$(dirname "$0")/common.sh"

COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
done_already() { for c in "${COMPONENTS[@]}" pause; do [ -x "$BIN/$c" ] || return 1; done; }
if done_already; then log "Kubernetes binaries cached in $BIN"; exit 0; fi

export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends golang-go rsync jq gcc libc6-dev >/dev/null

# The source package, through an apt configuration of its own (the host's sources stay as they are).
mkdir -p "$SRC/lists/partial" "$SRC/cache"
echo "deb-src http://deb.debian.org/debian bookworm main" >"$SRC/sources.list"
APT=(-o "Dir::Etc::SourceList=$SRC/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$SRC/lists" -o "Dir::Cache=$SRC/cache")
apt-get "${APT[@]}" update -q >/dev/null
(cd "$SRC" && apt-get "${APT[@]}" source --download-only kubernetes >/dev/null)
tree="$(find "$SRC" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
if [ -z "$tree" ]; then
    tar -xzf "$SRC"/kubernetes_*.orig.tar.gz -C "$SRC"
    tree="$(find "$SRC" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
    tar -xJf "$SRC"/kubernetes_*.debian.tar.xz -C "$tree"
    while read -r patch; do patch -d "$tree" -p1 -s <"$tree/debian/patches/$patch"; done <"$tree/debian/patches/series"
fi

# As debian/rules builds it: GOPATH mode through a symlink, static binaries; the generators (openapi-gen
# and the others) run first inside `make`. nice: the compile takes ~15-25 min of both cores.
mkdir -p "$tree/.go/src/k8s.io"
ln -sfn ../../.. "$tree/.go/src/k8s.io/kubernetes"
log "compiling Kubernetes $(basename "$tree") with $(go version | cut -d' ' -f3) (log: $SRC/build.log)"
(
    export GOPATH="$tree/.go" CGO_ENABLED=0 HOME="$SRC/home"
    mkdir -p "$HOME"
    cd "$tree/.go/src/k8s.io/kubernetes"
    nice -n 10 make WHAT="$(printf 'cmd/%s ' "${COMPONENTS[@]}")"
) >"$SRC/build.log" 2>&1 || fail build "make failed; the end of $SRC/build.log: $(tail -n 20 "$SRC/build.log")"
mkdir -p "$BIN"
for c in "${COMPONENTS[@]}"; do cp "$tree/_output/bin/$c" "$BIN/$c"; done
gcc -Os -static -o "$BIN/pause" "$tree/build/pause/linux/pause.c"
log "built ${COMPONENTS[*]} and pause into $BIN"
