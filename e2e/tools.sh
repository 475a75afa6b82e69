#!/usr/bin/env bash
# Build the delivery tools (helm, actionlint) from the Go module proxy, cached under
# ~/.cache/specpilot/tools/<tool>-<version>/bin like the control-plane binaries. Rebuilds only what
# is absent. Usage: e2e/tools.sh helm|actionlint — prints the binary's path on the last line.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
CACHE="${SPECPILOT_CACHE:-$HOME/.cache/specpilot}"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

build() {
  local name="$1" version="$2" pkg="$3" ldflags="${4:-}"
  local root="$CACHE/tools/$name-$version"
  if [ ! -x "$root/bin/$name" ]; then
    echo "[tools] building $name $version from the Go module proxy" >&2
    local start=$SECONDS
    GOBIN="$root/bin" GOPATH="$CACHE/tools/gopath" GOMODCACHE="$CACHE/tools/gopath/pkg/mod" \
      go install -ldflags "-s -w $ldflags" "$pkg@$version" >&2
    echo "[tools] $name built in $((SECONDS - start)) s" >&2
  fi
  echo "$root/bin/$name"
}

case "${1:-}" in
  helm) build helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" ;;
  actionlint) build actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint ;;
  *) echo "usage: $0 helm|actionlint" >&2; exit 2 ;;
esac
