#!/usr/bin/env bash
# Build the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
# from source through the Go module proxy, cached under ~/.cache/specpilot/<version>/.
# Rebuilds only what is absent. Prints the bin directory on the last line.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${SPECPILOT_CACHE:-$HOME/.cache/specpilot}"
BIN="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
mkdir -p "$BIN"
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubectl"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "[build] $*" >&2; }

staging_replaces() {
  # Every `k8s.io/x => ./staging/...` line of k8s.io/kubernetes's go.mod, mapped to the published v0.Y.Z.
  local gomod="$1" minor patch
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"; patch="$(echo "$K8S_VERSION" | cut -d. -f3)"
  grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$gomod" | awk '{print $1}' | sort -u |
    while read -r mod; do echo "replace $mod => $mod v0.$minor.$patch"; done
}

build_k8s() {
  local work="$CACHE/src/k8s-$K8S_VERSION" start=$SECONDS
  mkdir -p "$work"; cd "$work"
  if [ ! -f go.mod ]; then
    go mod init specpilot.local/k8sbuild >/dev/null 2>&1
    go mod edit -go=1.26
  fi
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module specpilot.local/k8sbuild"; echo; echo "go 1.26"; echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    staging_replaces "$gomod"
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving modules for k8s.io/kubernetes@$K8S_VERSION ($(grep -c '^replace' go.mod) staging replaces)"
  go mod tidy -e >&2 || true
  local minor; minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitTreeState=clean"
  for cmd in $K8S_CMDS; do
    [ -x "$BIN/$cmd" ] && continue
    log "building $cmd"
    go build -tags tools -ldflags "$ld" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  done
  log "kubernetes $K8S_VERSION built in $((SECONDS - start)) s"
}

build_etcd() {
  local work="$CACHE/src/etcd-$ETCD_VERSION" start=$SECONDS
  mkdir -p "$work"; cd "$work"
  local gomod
  gomod="$(go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module specpilot.local/etcdbuild"; echo; echo "go 1.26"; echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    grep -E '^\s*go.etcd.io/etcd/[a-z0-9/]+ => \.\./' "$gomod" | awk '{print $1}' | sort -u |
      while read -r mod; do echo "replace $mod => $mod $ETCD_VERSION"; done
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  go mod tidy -e >&2 || true
  log "building etcd"
  go build -tags tools -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "etcd $ETCD_VERSION built in $((SECONDS - start)) s"
}

[ -x "$BIN/etcd" ] || build_etcd
for cmd in $K8S_CMDS; do
  if [ ! -x "$BIN/$cmd" ]; then build_k8s; break; fi
done
echo "$BIN"
