# Shared by the k8s-local scripts (sourced): paths, logging, named steps, the processes this run started.
# shellcheck shell=bash

K8S_LOCAL_STATE="${K8S_LOCAL_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/detect-k8s-local}"
BIN="$K8S_LOCAL_STATE/bin"          # built once: kube-apiserver ... kubectl, pause (cached across runs)
SRC="$K8S_LOCAL_STATE/src"          # Debian's kubernetes source package
RUN="$K8S_LOCAL_STATE/run"          # this run's node: etcd data, containerd root, kubelet root, logs
BEFORE="$K8S_LOCAL_STATE/before"    # the machine's state before the run (restored by teardown.sh)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"

NODE_NAME=k8s-local
# The node's address: an interface of its own (the kubelet refuses loopback, and the host's own address
# would expose the kubelet's port beyond this machine).
NODE_LINK=kl-node
NODE_IP=10.250.0.1
POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.97.0.0/16
CNI_BRIDGE=kl0
API=https://127.0.0.1:16443          # the API server, on loopback; a static token, its self-signed certificate
CONTAINERD_SOCK="$RUN/containerd/containerd.sock"
PAUSE_IMAGE=k8s.gcr.io/pause:3.2     # the sandbox image 1.20 expects, built from build/pause
# The kernel settings the kubelet and kube-proxy change; teardown.sh puts back what was there.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
    kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet net.ipv4.ip_forward
    net.bridge.bridge-nf-call-iptables net.netfilter.nf_conntrack_max)

# The rules and custom chains of every table (empty tables and built-in chains with ACCEPT policy left out):
# what teardown.sh compares before and after.
iptables_state() {
    iptables-save | awk '/^\*/ {t = $1} /^-A/ {print t, $0}
        /^:/ {if (!($1 ~ /^:(INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING)$/ && $2 == "ACCEPT")) print t, $1, $2}'
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# fail STEP REASON: stops with the step's name.
fail() { log "k8s-local FAILED at step '$1': $2"; exit 1; }

# start NAME COMMAND...: a daemon in the background, its log in $RUN/logs/NAME.log, its pid recorded.
start() {
    local name="$1"; shift
    mkdir -p "$RUN/logs" "$RUN/pids"
    "$@" >"$RUN/logs/$name.log" 2>&1 &
    echo $! >"$RUN/pids/$name"
    log "started $name (pid $!)"
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds.
wait_for() {
    local seconds="$1" what="$2"; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
        sleep 1
    done
    log "$what"
}

kubectl_local() { "$BIN/kubectl" --kubeconfig "$RUN/kubeconfig" "$@"; }
api_healthy() { curl -skf -H "Authorization: Bearer $(cat "$RUN/pki/token")" "$API/healthz"; }
