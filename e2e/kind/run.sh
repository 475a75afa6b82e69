#!/usr/bin/env bash
# End-to-end on kind, the cluster tier's scenario on a real container runtime (what
# tests/cluster/test_chart.py proves on the local cluster, with the same files):
#   1. build the image and `kind load` it;
#   2. install the chart;
#   3. apply the demo pilot (manifests/demo/pilot.yaml: mock vLLM arms on CPU);
#   4. drive load with the loadgen Job (manifests/demo, kustomize);
#   5. `kubectl wait` for each scope's outcome (manifests/demo/outcomes.txt), then for Healthy;
#   6. dump state and logs on failure.
# Needs docker, kind, kubectl and helm on PATH. Creates the kind cluster when it is absent
# (KIND_CLUSTER, default specpilot); leaves it running.
set -o errexit
set -o nounset
set -o pipefail

REPO_ROOT="$(git rev-parse --show-toplevel)"
KIND_CLUSTER="${KIND_CLUSTER:-specpilot}"
IMAGE="${IMAGE:-specpilot/specpilot:dev}"
OPERATOR_NS="${OPERATOR_NS:-specpilot-system}"
PILOT_NS="${PILOT_NS:-specpilot-demo}"
TIMEOUT="${TIMEOUT:-300s}"
DEMO="$REPO_ROOT/manifests/demo"

log() { echo ">>> $*"; }

dump() {
  local code=$?
  [ "$code" -eq 0 ] && return 0
  log "failed ($code): state and logs"
  kubectl get nodes -o wide || true
  kubectl -n "$OPERATOR_NS" get all -o wide || true
  kubectl -n "$OPERATOR_NS" logs deployment/specpilot --all-containers --tail=300 || true
  kubectl -n "$PILOT_NS" get speculationpilots,all,configmaps -o wide || true
  kubectl -n "$PILOT_NS" get speculationpilot demo -o yaml || true
  kubectl -n "$PILOT_NS" get events --sort-by=.lastTimestamp || true
  for pod in $(kubectl -n "$PILOT_NS" get pods -o name 2>/dev/null); do
    log "logs of $pod"
    kubectl -n "$PILOT_NS" logs "$pod" --all-containers --tail=100 || true
  done
  exit "$code"
}
trap dump EXIT

if ! kind get clusters | grep -qx "$KIND_CLUSTER"; then
  log "creating kind cluster $KIND_CLUSTER"
  kind create cluster --name "$KIND_CLUSTER" --config "$REPO_ROOT/e2e/kind/kind-config.yaml" --wait 120s
fi
kubectl config use-context "kind-$KIND_CLUSTER"

log "advertising GPUs on the nodes (the mock arms ask for nvidia.com/gpu; none is used)"
for node in $(kubectl get nodes -o name); do
  kubectl patch "$node" --subresource=status --type=json \
    -p '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "8"}]'
done

log "1. building $IMAGE and loading it into kind"
docker build -f "$REPO_ROOT/operator/Dockerfile" -t "$IMAGE" "$REPO_ROOT"
kind load docker-image "$IMAGE" --name "$KIND_CLUSTER"

log "2. installing the chart, serving the pilot's namespace"
kubectl create namespace "$PILOT_NS" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install specpilot "$REPO_ROOT/charts/specpilot" \
  --namespace "$OPERATOR_NS" --create-namespace \
  --set image.registry= --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set "watchNamespaces={$PILOT_NS}" \
  --wait --timeout 180s
kubectl -n "$OPERATOR_NS" rollout status deployment/specpilot --timeout=120s

log "3. applying the demo pilot"
kubectl -n "$PILOT_NS" apply -f "$DEMO/pilot.yaml"
kubectl -n "$PILOT_NS" wait --for=condition=Ready speculationpilot/demo --timeout="$TIMEOUT"

log "4. driving load with the loadgen Job"
kubectl -n "$PILOT_NS" delete job demo-load --ignore-not-found
kubectl -n "$PILOT_NS" apply -k "$DEMO"

log "5. waiting for each scope's outcome"
grep -v '^#' "$DEMO/outcomes.txt" | while read -r scope state; do
  [ -n "$scope" ] || continue
  log "   $scope -> $state"
  kubectl -n "$PILOT_NS" wait speculationpilot/demo --timeout="$TIMEOUT" \
    --for=jsonpath="{.status.scopes[?(@.name==\"$scope\")].state}=$state"
done
kubectl -n "$PILOT_NS" wait speculationpilot/demo --timeout="$TIMEOUT" --for=jsonpath='{.status.phase}'=Healthy
kubectl -n "$PILOT_NS" get speculationpilot demo

log "deleting the pilot (ordered teardown)"
kubectl -n "$PILOT_NS" delete speculationpilot demo --timeout=180s
log "passed"
