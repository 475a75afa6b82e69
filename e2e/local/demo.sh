#!/usr/bin/env bash
# `make demo`: bring the local cluster up (building it if needed) and run the demo pilot on it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$("$ROOT/e2e/local/build.sh" | tail -n 1)"
KUBECONFIG="$("$ROOT/e2e/local/cluster.sh" up | tail -n 1)"
export KUBECONFIG PATH="$BIN:$PATH"
exec "${SPECPILOT_PYTHON:-$ROOT/.venv/bin/python}" "$ROOT/e2e/local/demo.py"
