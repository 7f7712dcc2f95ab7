#!/usr/bin/env bash
# Interop test: the official MCP Python SDK drives `tether`, which fronts real MCP
# servers: @modelcontextprotocol/server-everything (Node) and mcp-server-time
# (Python) over stdio, and server-everything again over Streamable HTTP and legacy
# HTTP+SSE (the test starts those two on free ports and kills them at the end).
# Then meta mode: tether with `--mode meta` in front of server-everything,
# @modelcontextprotocol/server-memory and @modelcontextprotocol/server-filesystem,
# found and called through search_tools + execute_tool, and the size of tools/list
# in flat and meta mode measured over the same three servers (the run fails if
# meta mode does not save at least half).
# Installs pinned versions under target/interop/ (idempotent, once), builds both
# runtimes' binaries, `tether` (tether-smol) and `tether-blocking`, and runs
# tests/interop/interop_test.py once against each; fails if either run fails.
#
# Needs: the Rust toolchain, python3 (>= 3.10) with venv + pip, node (>= 18) + npm,
# and the PyPI and npm registries. Any missing piece or failed install fails the run
# with a message; nothing is skipped.
#
#   bash tests/interop/run.sh            # INTEROP_VERBOSE=1 to print tether's log
#   INTEROP_RUNTIMES=smol bash tests/interop/run.sh   # one runtime only (smol, blocking)
set -euo pipefail

# Pinned versions (bump deliberately; see README "Tests").
MCP_VERSION=2.3.0                      # PyPI: mcp, the official Python SDK
MCP_SERVER_TIME_VERSION=2026.10.19     # PyPI: mcp-server-time
EVERYTHING_VERSION=2026.8.31           # npm: @modelcontextprotocol/server-everything
MEMORY_VERSION=2026.8.31               # npm: @modelcontextprotocol/server-memory
FILESYSTEM_VERSION=2026.8.31           # npm: @modelcontextprotocol/server-filesystem

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=tests/interop/node_pins.sh
source tests/interop/node_pins.sh
INTEROP_DIR="$ROOT/target/interop"
VENV="$INTEROP_DIR/venv"
NODE_DIR="$INTEROP_DIR/node"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
INTEROP_RUNTIMES="${INTEROP_RUNTIMES:-smol blocking}"
started=$SECONDS

fail() {
    echo "interop: FAILED: $*" >&2
    exit 1
}

need() {
    command -v "$1" > /dev/null 2>&1 || fail "'$1' not found on PATH ($2)"
}

need python3 "Python >= 3.10 with venv and pip is required"
need node "Node.js >= 18 is required"
need npm "npm is required"
need cargo "the Rust toolchain is required"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "python3 is $(python3 --version 2>&1); mcp $MCP_VERSION needs >= 3.10"
node -e 'process.exit(parseInt(process.versions.node) >= 18 ? 0 : 1)' \
    || fail "node is $(node --version); server-everything needs >= 18"
mkdir -p "$INTEROP_DIR"

# ---- the runtimes: name, cargo package, binary -----------------------------------
runtime_package() {
    case "$1" in
        smol) echo tether-smol ;;
        blocking) echo tether-blocking ;;
        *) fail "unknown runtime '$1' in INTEROP_RUNTIMES (expected smol and/or blocking)" ;;
    esac
}
runtime_bin() {
    case "$1" in
        smol) echo tether ;;
        blocking) echo tether-blocking ;;
    esac
}
for runtime in $INTEROP_RUNTIMES; do
    runtime_package "$runtime" > /dev/null
done
[ -n "${INTEROP_RUNTIMES// /}" ] || fail "INTEROP_RUNTIMES is empty (expected smol and/or blocking)"

# ---- Python: venv with the SDK and mcp-server-time ---------------------------
py_stamp="$VENV/.tether-interop-pins"
py_pins="mcp==$MCP_VERSION mcp-server-time==$MCP_SERVER_TIME_VERSION"
if [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$py_pins" ] \
    && "$VENV/bin/python" -c 'import mcp, mcp_server_time' > /dev/null 2>&1; then
    echo "== interop: python venv up to date ($py_pins)"
else
    echo "== interop: python venv ($py_pins)"
    if ! "$VENV/bin/python" -c 'import sys' > /dev/null 2>&1; then
        rm -rf "$VENV"
        python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
    fi
    # -q keeps it quiet; pip still prints errors. No retries hide a registry outage.
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q --no-input $py_pins \
        || fail "pip install $py_pins failed (is PyPI reachable?)"
    "$VENV/bin/python" -c 'import mcp, mcp_server_time' || fail "the installed mcp packages do not import"
    echo "$py_pins" > "$py_stamp"
fi
[ -x "$VENV/bin/mcp-server-time" ] || fail "$VENV/bin/mcp-server-time missing after install"

# ---- Node: server-everything, server-memory, server-filesystem -----------------
# (memory and filesystem are the meta-mode checks' other backends, and with
# everything the catalog whose tools/list size flat and meta mode are measured on)
node_pins=(
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
    "@modelcontextprotocol/server-memory@$MEMORY_VERSION"
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
)
npm_install_pinned interop "$NODE_DIR" "${node_pins[@]}"

# ---- the binaries ----------------------------------------------------------------
for runtime in $INTEROP_RUNTIMES; do
    package="$(runtime_package "$runtime")"
    bin="$(runtime_bin "$runtime")"
    echo "== interop: cargo build -p $package --bin $bin"
    cargo build -q -p "$package" --bin "$bin" || fail "cargo build of $bin (package $package) failed"
    [ -x "$TARGET_DIR/debug/$bin" ] || fail "$bin binary not found at $TARGET_DIR/debug/$bin"
done
setup_seconds=$((SECONDS - started))

# ---- the test, once per runtime -------------------------------------------------
# interop_test.py prints its closing "interop: N passed, N failed" line last; the
# summary repeats it per binary.
summary=()
failed=0
for runtime in $INTEROP_RUNTIMES; do
    bin="$(runtime_bin "$runtime")"
    echo
    echo "== interop ($bin): python tests/interop/interop_test.py with TETHER_BIN=$TARGET_DIR/debug/$bin"
    out="$INTEROP_DIR/interop-$bin.out"
    set +e
    TETHER_BIN="$TARGET_DIR/debug/$bin" INTEROP_RUNTIME="$runtime" INTEROP_DIR="$INTEROP_DIR" \
        INTEROP_SETUP_SECONDS=$setup_seconds \
        timeout --kill-after=10 300 "$VENV/bin/python" -u tests/interop/interop_test.py < /dev/null | tee "$out"
    status=${PIPESTATUS[0]}
    set -e
    counts="$(grep -E '^interop: [0-9]+ passed' "$out" | tail -n 1 | sed 's/^interop: //' || true)"
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        summary+=("interop ($bin): FAILED: did not finish within 300 s${counts:+ ($counts)}")
        failed=1
    elif [ "$status" -ne 0 ]; then
        summary+=("interop ($bin): FAILED: ${counts:-no result line} (exit status $status; see the FAIL lines above)")
        failed=1
    else
        summary+=("interop ($bin): $counts")
    fi
done

# ---- OAuth: tether's HTTP listener as a protected resource ------------------------
# oauth_test.py: the SDK's OAuth client logs in to `tether serve --listen` through
# tests/interop/oauth_server.py. The smol binary only: the blocking runtime serves stdio
# only. It prints its closing "oauth: N passed, N failed" line last.
case " $INTEROP_RUNTIMES " in
    *" smol "*)
        bin="$(runtime_bin smol)"
        echo
        echo "== oauth ($bin): python tests/interop/oauth_test.py with TETHER_BIN=$TARGET_DIR/debug/$bin"
        out="$INTEROP_DIR/oauth-$bin.out"
        set +e
        TETHER_BIN="$TARGET_DIR/debug/$bin" INTEROP_DIR="$INTEROP_DIR" \
            timeout --kill-after=10 300 "$VENV/bin/python" -u tests/interop/oauth_test.py < /dev/null | tee "$out"
        status=${PIPESTATUS[0]}
        set -e
        counts="$(grep -E '^oauth: [0-9]+ passed' "$out" | tail -n 1 | sed 's/^oauth: //' || true)"
        if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
            summary+=("oauth ($bin): FAILED: did not finish within 300 s${counts:+ ($counts)}")
            failed=1
        elif [ "$status" -ne 0 ]; then
            summary+=("oauth ($bin): FAILED: ${counts:-no result line} (exit status $status; see the FAIL lines above)")
            failed=1
        else
            summary+=("oauth ($bin): $counts")
        fi
        ;;
    *)
        summary+=("oauth: not run (it needs the smol runtime's tether; INTEROP_RUNTIMES=$INTEROP_RUNTIMES)")
        ;;
esac

echo
for line in "${summary[@]}"; do
    echo "$line"
done
[ "$failed" -eq 0 ] || fail "see the summary above"
