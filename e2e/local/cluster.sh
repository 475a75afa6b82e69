#!/usr/bin/env bash
# A real local Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler (built from source by build.sh) and the specpilot local node agent.
#
#   cluster.sh up      start (idempotent); the last line printed is the admin kubeconfig path
#   cluster.sh down    stop only the processes this script started (recorded PIDs)
#   cluster.sh reset   down, then remove all state (PKI, etcd data, pod logs)
#   cluster.sh status  print what runs
#   cluster.sh stop NAME   stop one component (a fault to test); the next `up` starts it again, etcd
#                          with its data
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${SPECPILOT_CLUSTER_DIR:-$ROOT/.cluster}"
PY="${SPECPILOT_PYTHON:-$ROOT/.venv/bin/python}"
API_PORT="${SPECPILOT_API_PORT:-16443}"
ETCD_PORT="${SPECPILOT_ETCD_PORT:-23790}"
KCM_PORT="${SPECPILOT_KCM_PORT:-10257}"
SCHEDULER_PORT="${SPECPILOT_SCHEDULER_PORT:-10259}"
NODE_NAME="${SPECPILOT_NODE_NAME:-specpilot-local}"
NODE_GPUS="${SPECPILOT_NODE_GPUS:-8}"
# Pod IPs: the API server rejects 127.0.0.0/8 in EndpointSlices, so pods get addresses from the
# RFC 2544 benchmarking range, bound to the loopback interface by one `local` route: traffic never
# leaves the machine. Adding that route needs root (CAP_NET_ADMIN); `up` fails with the fix otherwise.
POD_CIDR="${SPECPILOT_POD_CIDR:-198.18.0.0/16}"
PKI="$STATE/pki"; RUN="$STATE/run"; LOGS="$STATE/logs"
KUBECONFIG_OUT="$STATE/kubeconfig"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler localnode)

log() { echo "[cluster] $*" >&2; }

alive() {  # alive NAME: the recorded PID runs the recorded command
  local pidf="$RUN/$1.pid" pid
  [ -f "$pidf" ] || return 1
  pid="$(cat "$pidf")"
  [ -d "/proc/$pid" ] && grep -q -- "$(cat "$RUN/$1.cmd")" "/proc/$pid/cmdline" 2>/dev/null
}

start() {  # start NAME MATCH CMD...: run in its own session, record PID and a cmdline fragment
  local name="$1" match="$2"; shift 2
  alive "$name" && return 0
  setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"; echo "$match" >"$RUN/$name.cmd"
}

ports_free() {  # ports_free NAME PORT...: when NAME has to start, each of its ports must be free
  local name="$1" port; shift
  alive "$name" && return 0
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "cannot start $name: 127.0.0.1:$port is taken (another local cluster?); stop that, or set SPECPILOT_*_PORT"
      exit 1
    fi
  done
}

stop_one() {
  local name="$1" pid i
  alive "$name" || { rm -f "$RUN/$name.pid"; return 0; }
  pid="$(cat "$RUN/$name.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/$name.pid"
}

pki() {
  [ -f "$PKI/admin.crt" ] && return 0
  mkdir -p "$PKI"; cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=specpilot-local-ca" 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cert apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert node "/O=system:nodes/CN=system:node:$NODE_NAME"
  cd - >/dev/null
}

cert() {  # cert NAME SUBJECT [EXT]
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  if [ -n "${3:-}" ]; then
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 \
      -extfile <(printf '%s\n' "$3") 2>/dev/null
  else
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 2>/dev/null
  fi
  rm -f "$1.csr"
}

kubeconfig() {  # kubeconfig NAME CERT -> writes $STATE/NAME.kubeconfig
  cat >"$STATE/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: specpilot-local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: specpilot-local
  context: {cluster: specpilot-local, user: $1, namespace: default}
current-context: specpilot-local
KC
}

pod_network() {
  local ip
  ip="$(PATH="$PATH:/usr/sbin:/sbin" command -v ip || true)"
  if [ -z "$ip" ]; then
    log "pods need $POD_CIDR routed to lo, but the 'ip' command is missing: install iproute2"; exit 1
  fi
  # Read the table whole first: `grep -q` stops at the match, and under pipefail the SIGPIPE that
  # `ip` then gets would read as "no route".
  local routes
  routes="$("$ip" route show table local)"
  grep -q "^local $POD_CIDR dev lo" <<<"$routes" && return 0
  if ! "$ip" route add local "$POD_CIDR" dev lo; then
    log "pods need $POD_CIDR routed to lo (the API server rejects 127.0.0.0/8 in EndpointSlices);"
    log "run as root, or add the route once: sudo ip route add local $POD_CIDR dev lo"
    exit 1
  fi
  log "pod network $POD_CIDR routed to lo"
}

wait_for() {  # wait_for WHAT SECONDS CMD...
  local what="$1" deadline=$((SECONDS + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then log "timed out waiting for $what; logs in $LOGS"; tail -n 30 "$LOGS"/*.log >&2; exit 1; fi
    sleep 0.5
  done
}

up() {
  local t0=$SECONDS bin
  bin="$("$ROOT/e2e/local/build.sh" | tail -n 1)"
  mkdir -p "$STATE" "$RUN" "$LOGS"
  pki
  pod_network
  kubeconfig admin admin; kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler; kubeconfig node node
  cp "$STATE/admin.kubeconfig" "$KUBECONFIG_OUT"
  if ! alive etcd; then
    ports_free etcd "$ETCD_PORT" "$((ETCD_PORT + 10))"
    if [ -f "$RUN/etcd.keep" ]; then
      rm -f "$RUN/etcd.keep"  # etcd was stopped alone: it comes back with its data
    else
      rm -rf "$STATE/etcd"  # a fresh start is a fresh cluster
    fi
    start etcd "$bin/etcd" "$bin/etcd" --name local --data-dir "$STATE/etcd" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
      --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 10))" --unsafe-no-fsync --quota-backend-bytes 2147483648
  fi
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  ports_free kube-apiserver "$API_PORT"
  start kube-apiserver "$bin/kube-apiserver" "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$API_PORT" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction --allow-privileged=true --endpoint-reconciler-type none \
    --profiling=false --event-ttl 1h
  wait_for kube-apiserver 120 curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"
  ports_free kube-controller-manager "$KCM_PORT"; ports_free kube-scheduler "$SCHEDULER_PORT"
  start kube-controller-manager "$bin/kube-controller-manager" "$bin/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --use-service-account-credentials=true --leader-elect=false --bind-address 127.0.0.1 \
    --secure-port "$KCM_PORT" --profiling=false
  start kube-scheduler "$bin/kube-scheduler" "$bin/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --profiling=false
  start localnode "specpilot.cli" "$PY" -m specpilot.cli localnode \
    --kubeconfig "$STATE/node.kubeconfig" --node-name "$NODE_NAME" --gpus "$NODE_GPUS" \
    --state-dir "$STATE/node" --pod-cidr "$POD_CIDR" --api-server "https://127.0.0.1:$API_PORT" --ca-file "$PKI/ca.crt"
  export KUBECONFIG="$KUBECONFIG_OUT" PATH="$bin:$PATH"
  wait_for "the default ServiceAccount" 120 kubectl get serviceaccount default -n default
  wait_for "node $NODE_NAME Ready" 60 kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
  log "up in $((SECONDS - t0)) s; use it with: export KUBECONFIG=$KUBECONFIG_OUT"
  echo "$KUBECONFIG_OUT"
}

down() {
  local i
  rm -f "$RUN/etcd.keep"
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_one "${COMPONENTS[$i]}"; done
  log "down"
}

stop() {  # stop NAME: one component, as a fault
  local name="${1:-}"
  [[ " ${COMPONENTS[*]} " == *" $name "* ]] || { echo "usage: $0 stop NAME, NAME one of: ${COMPONENTS[*]}" >&2; exit 2; }
  [ "$name" = etcd ] && touch "$RUN/etcd.keep"
  stop_one "$name"
  log "$name stopped"
}

status() {
  local name
  for name in "${COMPONENTS[@]}"; do
    if alive "$name"; then echo "$name running (pid $(cat "$RUN/$name.pid"))"; else echo "$name stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) mkdir -p "$RUN"; down ;;
  reset) mkdir -p "$RUN"; down; rm -rf "$STATE" ;;
  status) mkdir -p "$RUN"; status ;;
  stop) mkdir -p "$RUN"; stop "${2:-}" ;;
  *) echo "usage: $0 up|down|reset|status|stop NAME" >&2; exit 2 ;;
esac
