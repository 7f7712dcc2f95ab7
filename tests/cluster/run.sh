#!/usr/bin/env bash
# Cluster test: three tether replicas on loopback behind haproxy (leastconn, no
# affinity) and then nginx (consistent hashing on Mcp-Session-Id), under load from
# clients of the official Python SDK (2025-11-25 sessions and stateless 2026-07-28):
# kill -9 of a replica, a rolling restart, forged and changed session ids. See
# tests/cluster/cluster_test.py for the checks.
#
# Installs haproxy and nginx from Debian's archive when missing (apt-get, as root
# or through sudo -n), the official Python SDK (the version tests/interop pins) in
# target/cluster/venv, and builds `tether` and `mock-mcp`.
#
#   bash tests/cluster/run.sh                 # CLUSTER_SECONDS=60 per scenario (default)
#   CLUSTER_ONLY=haproxy bash tests/cluster/run.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
CLUSTER_DIR="$ROOT/target/cluster"
VENV="$CLUSTER_DIR/venv"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
# The SDK version the interop test pins: one place to bump it.
MCP_VERSION="$(sed -n 's/^MCP_VERSION=\([0-9.]*\).*/\1/p' tests/interop/run.sh)"
[ -n "$MCP_VERSION" ] || { echo "cluster: FAILED: no MCP_VERSION in tests/interop/run.sh" >&2; exit 1; }

missing=()
command -v haproxy > /dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v nginx > /dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=()
    [ "$(id -u)" -eq 0 ] || SUDO=(sudo -n)
    echo "cluster: installing ${missing[*]} from Debian's archive"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${missing[@]}" > /dev/null
fi
export PATH="$PATH:/usr/sbin"

mkdir -p "$CLUSTER_DIR"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2> /dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "mcp==$MCP_VERSION"
fi

cargo build -q -p tether-smol --bin tether
cargo build -q -p tether-tests --bin mock-mcp

args=(--tether "$TARGET_DIR/debug/tether" --mock "$TARGET_DIR/debug/mock-mcp" --seconds "${CLUSTER_SECONDS:-60}")
[ -z "${CLUSTER_ONLY:-}" ] || args+=(--only "$CLUSTER_ONLY")
exec "$VENV/bin/python" tests/cluster/cluster_test.py "${args[@]}"
