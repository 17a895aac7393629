#!/usr/bin/env bash
# Stops what node.sh started and puts the machine back as $BEFORE recorded it: processes (by the pids this
# run recorded, and the containerd shims serving its socket), mounts under $RUN, the CNI bridge and its veths,
# network namespaces, iptables, the kubepods cgroups, kernel settings. Prints what differs afterwards.
set -uo pipefail
source "$(dirname "$0")/common.sh"
[ -d "$RUN" ] || { log "nothing to tear down ($RUN absent)"; exit 0; }

stop_pid() {  # stop_pid NAME: SIGTERM, then SIGKILL after 15 s
    local file="$RUN/pids/$1" pid
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
}

# Pods first, so the containers stop as the kubelet would stop them.
if [ -f "$RUN/pids/kube-apiserver" ] && api_healthy >/dev/null 2>&1; then
    kubectl_local delete namespace detect --wait=true --timeout=90s >/dev/null 2>&1 || true
fi
for name in kube-proxy kubelet kube-scheduler kube-controller-manager; do stop_pid "$name"; done
if [ -S "$CONTAINERD_SOCK" ]; then
    for task in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks list -q 2>/dev/null); do
        ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
    sleep 2
fi
stop_pid containerd
# The shims containerd started for this run (they outlive it): found by the socket path in their arguments.
for pid in $(pgrep -f -- "-address $CONTAINERD_SOCK" || true); do kill -KILL "$pid" 2>/dev/null || true; done
stop_pid kube-apiserver
stop_pid etcd

# Mounts under the run's folders (containerd's rootfs and shm, kubelet's volumes), deepest first.
awk '{print $5}' /proc/self/mountinfo | grep -E "^($RUN|/run/netns/cni-|/var/run/netns/cni-)" | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
for ns in /var/run/netns/cni-*; do
    [ -e "$ns" ] || continue
    grep -qx "$(basename "$ns")" "$BEFORE/netns" 2>/dev/null || ip netns delete "$(basename "$ns")" 2>/dev/null || true
done
for link in "$CNI_BRIDGE" "$NODE_LINK"; do ip link show "$link" >/dev/null 2>&1 && ip link delete "$link"; done
for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    grep -qx "$link" "$BEFORE/links" || { [[ "$link" == veth* ]] && ip link delete "$link" 2>/dev/null; } || true
done

# iptables as it was (kube-proxy's KUBE-* chains, the portmap and bridge plugins' CNI-* chains).
# Tables that were empty before are emptied (iptables-restore only rewrites the tables its input names).
iptables-restore <"$BEFORE/iptables.save"
for table in filter nat mangle raw security; do
    grep -q "^\*$table" "$BEFORE/iptables.save" || { iptables -t "$table" -F 2>/dev/null; iptables -t "$table" -X 2>/dev/null; } || true
done

# cgroups the kubelet made (kubepods*), deepest first.
for dir in /sys/fs/cgroup/*/kubepods*; do
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done

# Kernel settings as they were.
while IFS='=' read -r key value; do
    [ "$(sysctl -n "$key" 2>/dev/null)" = "$value" ] || sysctl -q -w "$key=$value" >/dev/null || log "could not restore $key=$value"
done <"$BEFORE/sysctl"

rm -rf "$RUN"
podman rmi --force "$PAUSE_IMAGE" >/dev/null 2>&1 || true   # node.sh tagged it in podman's storage to export it

# What still differs from before.
left=0
diff_state() {  # diff_state WHAT BEFORE-FILE NOW-COMMAND...
    local what="$1" before="$2"; shift 2
    local changes
    changes="$(diff <(sort "$before") <("$@" | sort) | grep '^[<>]' || true)"
    if [ -n "$changes" ]; then log "$what differs from before:"; printf '%s\n' "$changes" >&2; left=1; fi
}
now_sysctl() { while IFS='=' read -r key _; do printf '%s=%s\n' "$key" "$(sysctl -n "$key" 2>/dev/null)"; done <"$BEFORE/sysctl"; }
now_iptables() { iptables_state; }
now_links() { ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1; }
now_mounts() { awk '{print $5}' /proc/self/mountinfo; }
now_cgroups() { find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d; }
diff_state "kernel settings" "$BEFORE/sysctl" now_sysctl
diff_state "iptables" "$BEFORE/iptables" now_iptables
diff_state "network links" "$BEFORE/links" now_links
diff_state "mounts" "$BEFORE/mounts" now_mounts
diff_state "cgroups" "$BEFORE/cgroups" now_cgroups
if [ "$left" -eq 0 ]; then log "teardown: the machine is as before (kernel settings, iptables, links, mounts, cgroups)"; fi
exit "$left"
