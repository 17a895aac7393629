#!/usr/bin/env bash
# Starts a single-node Kubernetes 1.20 from $BIN: etcd-server and containerd from Debian, the API server on
# a local insecure port, controller-manager, scheduler, kubelet and kube-proxy (iptables). Records the
# machine's state first (teardown.sh restores it), then waits for the node to be Ready.
set -euo pipefail
source "$(dirname "$0")/common.sh"

export DEBIAN_FRONTEND=noninteractive
need=()
for pair in etcd:etcd-server containerd:containerd ctr:containerd runc:runc iptables:iptables conntrack:conntrack \
    openssl:openssl; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[ "${#need[@]}" -eq 0 ] || apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
[ -d /usr/lib/cni ] || apt-get install -y -q --no-install-recommends containernetworking-plugins >/dev/null

# ----------------------------------------------------------------------------------------- the machine before
rm -rf "$BEFORE" && mkdir -p "$BEFORE"
for key in "${SYSCTLS[@]}"; do
    value="$(sysctl -n "$key" 2>/dev/null)" && printf '%s=%s\n' "$key" "$value" >>"$BEFORE/sysctl"
done
iptables-save >"$BEFORE/iptables.save"
iptables_state >"$BEFORE/iptables"
ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort >"$BEFORE/links"
awk '{print $5}' /proc/self/mountinfo | sort >"$BEFORE/mounts"
find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d | sort >"$BEFORE/cgroups"
ls /var/run/netns 2>/dev/null | sort >"$BEFORE/netns" || true

rm -rf "$RUN" && mkdir -p "$RUN"/{etcd,pki,containerd,kubelet,cni,logs,pids}
ip link add "$NODE_LINK" type veth peer name "$NODE_LINK-peer"   # a veth pair: no dummy module needed
ip addr add "$NODE_IP/32" dev "$NODE_LINK"
ip link set "$NODE_LINK-peer" up && ip link set "$NODE_LINK" up

# ------------------------------------------------------------------------------------------------ containerd
# restrict_oom_score_adj: containers may not lower oom_score_adj below containerd's own (root here cannot).
cat >"$RUN/containerd/config.toml" <<TOML
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni"
TOML
cat >"$RUN/cni/10-k8s-local.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "k8s-local", "plugins": [
  {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
JSON
start containerd containerd --config "$RUN/containerd/config.toml"
wait_for 30 "containerd up" ctr --address "$CONTAINERD_SOCK" version || fail node "containerd did not start: $(tail -n 5 "$RUN/logs/containerd.log")"

# The pause image from build/pause, as a one-file image, into containerd's Kubernetes namespace.
mkdir -p "$RUN/pause-rootfs" && cp "$BIN/pause" "$RUN/pause-rootfs/pause"
tar -C "$RUN/pause-rootfs" -cf "$RUN/pause-rootfs.tar" pause
podman import --quiet --change 'ENTRYPOINT ["/pause"]' "$RUN/pause-rootfs.tar" "$PAUSE_IMAGE" >/dev/null
podman save --quiet --format docker-archive -o "$RUN/pause.tar" "$PAUSE_IMAGE"
ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$RUN/pause.tar" >/dev/null

# ----------------------------------------------------------------------------------------- control plane
openssl genrsa -out "$RUN/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub" 2>/dev/null
# One static token for every component and kubectl; authorization AlwaysAllow (a throwaway, loopback-only
# node). The API server makes its own self-signed serving certificate in $RUN/pki.
openssl rand -hex 16 >"$RUN/pki/token"
printf '%s,k8s-local-admin,1,system:masters\n' "$(cat "$RUN/pki/token")" >"$RUN/pki/tokens.csv"
cat >"$RUN/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
contexts: [{name: local, context: {cluster: local, user: local}}]
users: [{name: local, user: {token: "$(cat "$RUN/pki/token")"}}]
current-context: local
YAML
start etcd etcd --data-dir "$RUN/etcd" --listen-client-urls http://127.0.0.1:12379 \
    --advertise-client-urls http://127.0.0.1:12379 --listen-peer-urls http://127.0.0.1:12380
start kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:12379 \
    --bind-address 127.0.0.1 --secure-port "${API##*:}" --token-auth-file "$RUN/pki/tokens.csv" \
    --advertise-address "$NODE_IP" --cert-dir "$RUN/pki" --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-key-file "$RUN/pki/sa.pub" --service-account-signing-key-file "$RUN/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --authorization-mode AlwaysAllow \
    --kubelet-preferred-address-types InternalIP
wait_for 90 "API server up" api_healthy || fail node "the API server did not start: $(tail -n 5 "$RUN/logs/kube-apiserver.log")"
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$RUN/kubeconfig" --leader-elect=false \
    --service-account-private-key-file "$RUN/pki/sa.key" --use-service-account-credentials=false \
    --cluster-cidr "$POD_CIDR" --port 0
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$RUN/kubeconfig" --leader-elect=false --port 0

# -------------------------------------------------------------------------------------------------- the node
# --oom-score-adj 0: root here cannot lower its own. cgroupfs driver: no systemd on this machine.
start kubelet "$BIN/kubelet" --kubeconfig "$RUN/kubeconfig" --hostname-override "$NODE_NAME" \
    --container-runtime remote --container-runtime-endpoint "unix://$CONTAINERD_SOCK" \
    --cgroup-driver cgroupfs --root-dir "$RUN/kubelet" --cert-dir "$RUN/kubelet/pki" --fail-swap-on=false \
    --oom-score-adj 0 --read-only-port 0 --port 10250 --healthz-port 0 --address "$NODE_IP" \
    --node-ip "$NODE_IP" --eviction-hard 'memory.available<100Mi,nodefs.available<2%,imagefs.available<2%'
start kube-proxy "$BIN/kube-proxy" --kubeconfig "$RUN/kubeconfig" --hostname-override "$NODE_NAME" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --conntrack-max-per-core 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249
ready() { kubectl_local get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for 180 "node $NODE_NAME Ready" ready || fail node "the node is not Ready: $(kubectl_local describe node "$NODE_NAME" 2>&1 | tail -n 15; tail -n 10 "$RUN/logs/kubelet.log")"
sleep 3
for file in "$RUN"/pids/*; do
    kill -0 "$(cat "$file")" 2>/dev/null || fail node "$(basename "$file") exited: $(tail -n 5 "$RUN/logs/$(basename "$file").log")"
done
