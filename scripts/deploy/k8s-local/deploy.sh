#!/usr/bin/env bash
# On the node node.sh started: what the real 1.20 API server says of the rendered CPU overlay, then the
# test-only overlay applied with the image `make image-test` built; /detect through a port-forward with and
# without a key; kubectl exec and logs; a rolling restart while clients run through the Service.
set -euo pipefail
source "$(dirname "$0")/common.sh"
IMAGE=localhost/detect:serve-cpu-image-test
NS=detect
REPORT="$RUN/report.txt"
report() { printf '%s\n' "$*" | tee -a "$REPORT" >&2; }

podman image exists "$IMAGE" 2>/dev/null || CONTAINERS_CONF="${CONTAINERS_CONF:-}" podman image exists "$IMAGE" ||
    fail image "$IMAGE is not built: run make image-test first"

# ---------------------------------------------------------------------------- what the API server accepts
kubectl kustomize "$ROOT/k8s/overlays/cpu" >"$RUN/cpu.yaml"
report "== the API server (1.20) on the rendered k8s/overlays/cpu (kubectl apply --dry-run=server; namespace first):"
kubectl kustomize "$ROOT/k8s/overlays/cpu" | "$ROOT/.venv/bin/python" -c '
import sys, yaml
print(yaml.safe_dump(next(d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Namespace")))' |
    kubectl_local apply -f - >/dev/null
kubectl_local apply --dry-run=server -f "$RUN/cpu.yaml" >"$RUN/dry-run.out" 2>&1 || true
sed 's/^/   /' "$RUN/dry-run.out" | tee -a "$REPORT" >&2

# ------------------------------------------------------------------------------------------- the image
log "loading $IMAGE into the node's containerd"
podman save --quiet --format docker-archive -o "$RUN/detect.tar" "$IMAGE"
ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$RUN/detect.tar" >/dev/null
rm -f "$RUN/detect.tar"

# ------------------------------------------------------------------------ volume, Secret, test overlay
cp -r "$ROOT/models" "$RUN/models" && chmod -R a+rX "$RUN/models"
kubectl_local apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: detect-models-k8s-local}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteMany, ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: "$RUN/models", type: Directory}
YAML
KEY="$(openssl rand -hex 16)"
printf '%s\n' "$KEY" >"$RUN/api-keys.txt"
kubectl kustomize "$HERE/overlay" >"$RUN/test-overlay.yaml"
kubectl_local apply -f "$RUN/test-overlay.yaml" 2>&1 | sed 's/^/   /' | tee -a "$REPORT" >&2
kubectl_local -n "$NS" create secret generic detect-api-keys --from-file=api-keys="$RUN/api-keys.txt" >/dev/null
started=$SECONDS
kubectl_local -n "$NS" rollout status deployment/detect --timeout=300s >&2 ||
    fail ready "$(kubectl_local -n "$NS" describe pods 2>&1 | tail -n 30)"
report "== pod Ready $((SECONDS - started)) s after the Secret existed"
pod="$(kubectl_local -n "$NS" get pods -l app.kubernetes.io/component=server -o jsonpath='{.items[0].metadata.name}')"
report "   kubectl exec id: $(kubectl_local -n "$NS" exec "$pod" -- id)"
write="$(kubectl_local -n "$NS" exec "$pod" -- touch /probe-write 2>&1 | grep -v '^command terminated' || true)"
echo "$write" | grep -q "Read-only file system" || fail ready "writing to / in the pod: ${write:-it worked}"
report "   root filesystem read-only: $write"
models_ready="$(kubectl_local -n "$NS" logs "$pod" | grep -c ' ready on ' || true)"
[ "$models_ready" -gt 0 ] || fail ready "kubectl logs shows no model ready"
report "   kubectl logs: $models_ready model versions ready"

# -------------------------------------------------------------------------------- /detect, port-forward
image_file="$(ls "${IMAGE_TEST_STATE:-$HOME/.cache/detect-image-test}"/synth/val/*.jpg | head -n1)"
kubectl_local -n "$NS" port-forward svc/detect 18000:8000 >"$RUN/logs/port-forward.log" 2>&1 &
echo $! >"$RUN/pids/port-forward"
wait_for 30 "port-forward up" curl -s -o /dev/null http://127.0.0.1:18000/health/live || fail request "port-forward did not start"
no_key="$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: image/jpeg' --data-binary @"$image_file" http://127.0.0.1:18000/detect)"
with_key="$(curl -s -H "X-API-Key: $KEY" -H 'Content-Type: image/jpeg' --data-binary @"$image_file" http://127.0.0.1:18000/detect)"
[ "$no_key" = 401 ] || fail request "/detect without a key answered $no_key"
echo "$with_key" | grep -q '"detections":\[{' || fail request "/detect with the key: $with_key"
report "== /detect through kubectl port-forward: 401 without a key; with it: ${with_key:0:160}..."
kill "$(cat "$RUN/pids/port-forward")" 2>/dev/null || true

# ------------------------------------------------------------------------------------- rolling restart
cluster_ip="$(kubectl_local -n "$NS" get svc detect -o jsonpath='{.spec.clusterIP}')"
url="http://$cluster_ip:8000/detect"
rm -f "$RUN/stop"
"$ROOT/.venv/bin/python" "$HERE/client.py" "$url" "$KEY" "$image_file" "$RUN/stop" >"$RUN/client.json" &
fresh=$!
"$ROOT/.venv/bin/python" "$HERE/client.py" "$url" "$KEY" "$image_file" "$RUN/stop" --keep-alive >"$RUN/client-keepalive.json" &
kept=$!
sleep 5
old_pod="$pod"
kubectl_local -n "$NS" rollout restart deployment/detect >/dev/null
kubectl_local -n "$NS" rollout status deployment/detect --timeout=300s >&2 || fail restart "the rollout did not finish"
wait_for 90 "the old pod is gone" bash -c "! $BIN/kubectl --kubeconfig $RUN/kubeconfig -n $NS get pod $old_pod"
sleep 3
touch "$RUN/stop"
wait "$fresh" "$kept"
report "== rolling restart through the Service ($url), a client per connection policy:"
report "   new connection per request: $(cat "$RUN/client.json")"
report "   one keep-alive connection:  $(cat "$RUN/client-keepalive.json")"
grep -q '"failures": \[\]' "$RUN/client.json" || fail restart "requests failed during the rolling restart: $(cat "$RUN/client.json")"
