#!/usr/bin/env bash
# Peers interop suite: tether against MCP servers and authorization servers that
# nobody here wrote, installed from PyPI and npm at pinned versions. Scenarios
# (tests/interop/peers/peers_test.py has the details):
#
#   keepalive  Streamable HTTP backends whose idle connections close after 5 s: the
#              official Python SDK's MCPServer under uvicorn and the TypeScript SDK's
#              StreamableHTTPServerTransport on node's http server; the Python SDK's
#              client calls a tool through `tether --config FILE` (stdio) 50 times at
#              gaps spread over 4.5-5.5 s, both servers at once. Expected: no failed call.
#   fastmcp    FastMCP with its built-in authorization server (InMemoryOAuthProvider,
#              short-lived tokens, rotated refresh tokens) as a remote backend: login
#              with no person (a $BROWSER that follows the redirects), calls, calls
#              across several token lifetimes, restart with an expired stored token,
#              the AS forgetting the client (server restarted), logout.
#   oidc       node-oidc-provider (DPoP offered, dynamic registration, resource
#              indicators: JWT access tokens) in front of a second tether
#              (`serve --listen` with a `tether.authorization` section) fronting
#              mock-mcp; the first tether has it as a remote backend with no `dpop`
#              setting, then again with "dpop": false. Calls through both, token
#              requests counted.
#   refusing   A FastMCP resource whose verifier refuses every token (another
#              audience) while node-oidc-provider issues them: 60 s of calls, the
#              token requests at the AS counted (at most 6 a minute), and what
#              /status and `tether status` say.
#
# Installs the peers under target/interop/ (peers-venv, peers-node; idempotent, once),
# builds `tether` and `mock-mcp`, runs each scenario in its own process under a time
# limit, prints `ok ...` / `FAIL ...` per check and `peers: N passed, N failed` last;
# exits non-zero on any failure. Every process it starts is killed at the end (their
# ids are recorded in target/interop/peers-run/pids). Logs: target/interop/peers-run/.
# keepalive runs beside the other scenarios (it mostly waits); PEERS_SERIAL=1 runs
# everything one after the other.
#
#   bash tests/interop/peers.sh                          # all four
#   bash tests/interop/peers.sh keepalive fastmcp        # some of them
#   PEERS_KEEPALIVE_CALLS=6 bash tests/interop/peers.sh keepalive   # a short version
#
# Knobs (environment): PEERS_KEEPALIVE_CALLS (50), PEERS_KEEPALIVE_GAP_MIN (4.5),
# PEERS_KEEPALIVE_GAP_MAX (5.5), PEERS_FASTMCP_TOKEN_TTL (15), PEERS_FASTMCP_LIFETIMES
# (3.5), PEERS_OIDC_TOKEN_TTL (20), PEERS_OIDC_SECONDS (45), PEERS_REFUSING_SECONDS (60),
# PEERS_REFUSING_MAX_TOKEN_REQUESTS (6), PEERS_TETHER_LOG (tether's --log-level, info),
# PEERS_VERBOSE=1 (print every log), PEERS_TETHER_BIN=PATH (run that tether
# binary instead of building one: e.g. an older build to compare).
#
# Needs: the Rust toolchain, python3 (>= 3.10) with venv + pip, node (>= 20) + npm, and
# the PyPI and npm registries. Only loopback addresses are used.
set -euo pipefail

# Pinned versions (bump deliberately).
MCP_VERSION=2.3.0              # PyPI: mcp, the official Python SDK (MCPServer, the client)
FASTMCP_VERSION=4.1.6          # PyPI: fastmcp (FastMCP, InMemoryOAuthProvider, JWTVerifier)
UVICORN_VERSION=0.54.0         # PyPI: uvicorn
NODE_SDK_VERSION=1.32.2        # npm: @modelcontextprotocol/sdk
OIDC_PROVIDER_VERSION=9.13.3   # npm: oidc-provider
JOSE_VERSION=6.2.18            # npm: jose (oidc_provider.mjs makes its signing key with it)
ZOD_VERSION=4.6.7              # npm: zod (node_mcp_server.mjs's input schema)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=tests/interop/node_pins.sh
source tests/interop/node_pins.sh
INTEROP_DIR="$ROOT/target/interop"
VENV="$INTEROP_DIR/peers-venv"
NODE_DIR="$INTEROP_DIR/peers-node"
RUN_DIR="$INTEROP_DIR/peers-run"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
ALL_SCENARIOS="keepalive fastmcp oidc refusing"
started=$SECONDS

fail() {
    echo "peers: FAILED: $*" >&2
    echo "peers: 0 passed, 1 failed"
    exit 1
}

need() {
    command -v "$1" > /dev/null 2>&1 || fail "'$1' not found on PATH ($2)"
}

# ---- which scenarios ------------------------------------------------------------
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || read -r -a scenarios <<< "$ALL_SCENARIOS"
for s in "${scenarios[@]}"; do
    case " $ALL_SCENARIOS " in
        *" $s "*) ;;
        *) fail "unknown scenario '$s' (known: $ALL_SCENARIOS)" ;;
    esac
done

need python3 "Python >= 3.10 with venv and pip is required"
need node "Node.js >= 20 is required"
need npm "npm is required"
need cargo "the Rust toolchain is required"
need timeout "coreutils' timeout is required"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || fail "python3 is $(python3 --version 2>&1); mcp $MCP_VERSION needs >= 3.10"
node -e 'process.exit(parseInt(process.versions.node) >= 20 ? 0 : 1)' \
    || fail "node is $(node --version); oidc-provider $OIDC_PROVIDER_VERSION needs >= 20"
mkdir -p "$INTEROP_DIR" "$RUN_DIR"

# ---- every process this run starts dies with it ------------------------------------
PIDFILE="$RUN_DIR/pids"
: > "$PIDFILE"
bg_pids=()
cleanup() {
    local pid
    for pid in "${bg_pids[@]}"; do
        kill -TERM "$pid" 2> /dev/null || true
    done
    # The children were started in their own process groups (pgid = pid); kill a
    # group only while its leader is still ours to name.
    while read -r pid; do
        [ -n "$pid" ] || continue
        if [ "$(ps -o pgid= -p "$pid" 2> /dev/null | tr -d ' ')" = "$pid" ]; then
            kill -TERM -- "-$pid" 2> /dev/null || true
        elif [ "$(readlink "/proc/$pid/exe" 2> /dev/null)" = "$(readlink -f "${TETHER:-/nonexistent}")" ]; then
            kill -TERM "$pid" 2> /dev/null || true # a tether the SDK's stdio client started
        fi
    done < "$PIDFILE"
    sleep 1
    while read -r pid; do
        [ -n "$pid" ] || continue
        if [ "$(ps -o pgid= -p "$pid" 2> /dev/null | tr -d ' ')" = "$pid" ]; then
            kill -KILL -- "-$pid" 2> /dev/null || true
        elif [ "$(readlink "/proc/$pid/exe" 2> /dev/null)" = "$(readlink -f "${TETHER:-/nonexistent}")" ]; then
            kill -KILL "$pid" 2> /dev/null || true
        fi
    done < "$PIDFILE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- Python: the SDK, FastMCP, uvicorn (their own venv: fastmcp brings its own deps) ---
py_stamp="$VENV/.tether-peers-pins"
py_pins="mcp==$MCP_VERSION fastmcp==$FASTMCP_VERSION uvicorn==$UVICORN_VERSION"
py_check='import mcp, fastmcp, uvicorn, httpx2, anyio; from mcp.server.mcpserver import MCPServer'
if [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$py_pins" ] \
    && "$VENV/bin/python" -c "$py_check" > /dev/null 2>&1; then
    echo "== peers: python venv up to date ($py_pins)"
else
    echo "== peers: python venv ($py_pins)"
    if ! "$VENV/bin/python" -c 'import sys' > /dev/null 2>&1; then
        rm -rf "$VENV"
        python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (Debian: apt-get install python3-venv)"
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 timeout 600 "$VENV/bin/pip" install -q --no-input $py_pins \
        || fail "pip install $py_pins failed (is PyPI reachable?)"
    "$VENV/bin/python" -c "$py_check" || fail "the installed Python packages do not import"
    echo "$py_pins" > "$py_stamp"
fi

# ---- Node: the TypeScript SDK, oidc-provider --------------------------------------
node_pins=(
    "@modelcontextprotocol/sdk@$NODE_SDK_VERSION"
    "oidc-provider@$OIDC_PROVIDER_VERSION"
    "jose@$JOSE_VERSION"
    "zod@$ZOD_VERSION"
)
npm_install_pinned peers "$NODE_DIR" "${node_pins[@]}"

# ---- the binaries (another cargo may hold the build lock: cargo waits for it) --------
if [ -n "${PEERS_TETHER_BIN:-}" ]; then
    TETHER="$PEERS_TETHER_BIN"
    echo "== peers: tether is PEERS_TETHER_BIN=$TETHER (not built); cargo build -p tether-tests --bin mock-mcp"
else
    TETHER="$TARGET_DIR/debug/tether"
    echo "== peers: cargo build -p tether-smol --bin tether; -p tether-tests --bin mock-mcp"
    timeout 1800 cargo build -q -p tether-smol --bin tether || fail "cargo build of tether failed"
fi
timeout 1800 cargo build -q -p tether-tests --bin mock-mcp || fail "cargo build of mock-mcp failed"
[ -x "$TETHER" ] || fail "tether not found at $TETHER"
[ -x "$TARGET_DIR/debug/mock-mcp" ] || fail "mock-mcp not found at $TARGET_DIR/debug/mock-mcp"
echo "== peers: set up in $((SECONDS - started)) s"

# ---- the scenarios ----------------------------------------------------------------
budget() {
    case "$1" in
        keepalive)
            local calls="${PEERS_KEEPALIVE_CALLS:-50}" hi="${PEERS_KEEPALIVE_GAP_MAX:-5.5}"
            python3 -c "print(int($calls * ($hi + 3) + 240))"
            ;;
        fastmcp) python3 -c "print(int(${PEERS_FASTMCP_TOKEN_TTL:-15} * (${PEERS_FASTMCP_LIFETIMES:-3.5} + 2) + 420))" ;;
        oidc) python3 -c "print(int(2 * ${PEERS_OIDC_SECONDS:-45} + 420))" ;;
        refusing) python3 -c "print(int(${PEERS_REFUSING_SECONDS:-60} + 240))" ;;
    esac
}

export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
export TETHER_BIN="$TETHER" MOCK_MCP_BIN="$TARGET_DIR/debug/mock-mcp"
export PEERS_DIR="$INTEROP_DIR" PEERS_NODE_DIR="$NODE_DIR" PEERS_PYTHON="$VENV/bin/python" PEERS_PIDFILE="$PIDFILE"
export PEERS_FASTMCP_TOKEN_TTL="${PEERS_FASTMCP_TOKEN_TTL:-15}" PEERS_OIDC_TOKEN_TTL="${PEERS_OIDC_TOKEN_TTL:-20}"
export PEERS_OIDC_SECONDS="${PEERS_OIDC_SECONDS:-45}"

# Runs one scenario; its output goes to $RUN_DIR/NAME.out (and to the terminal with
# `tee`), its exit status to NAME.status.
run_scenario() {
    local name="$1" mode="$2" limit status
    limit="$(budget "$name")"
    set +e
    if [ "$mode" = tee ]; then
        timeout --kill-after=15 "$limit" "$VENV/bin/python" -u tests/interop/peers/peers_test.py "$name" \
            < /dev/null 2>&1 | tee "$RUN_DIR/$name.out"
        status=${PIPESTATUS[0]}
    else
        timeout --kill-after=15 "$limit" "$VENV/bin/python" -u tests/interop/peers/peers_test.py "$name" \
            < /dev/null > "$RUN_DIR/$name.out" 2>&1
        status=$?
    fi
    set -e
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        echo "FAIL $name: did not finish within $limit s (killed)" | tee -a "$RUN_DIR/$name.out"
    fi
    echo "$status" > "$RUN_DIR/$name.status"
}

serial=()
parallel=""
for s in "${scenarios[@]}"; do
    rm -f "$RUN_DIR/$s.out" "$RUN_DIR/$s.status"
    if [ "$s" = keepalive ] && [ "${PEERS_SERIAL:-0}" != 1 ] && [ ${#scenarios[@]} -gt 1 ]; then
        parallel=keepalive
    else
        serial+=("$s")
    fi
done
if [ -n "$parallel" ]; then
    echo
    echo "== peers: keepalive runs beside the others (limit $(budget keepalive) s); its output comes after theirs"
    run_scenario keepalive file &
    bg_pids+=("$!")
fi
for s in "${serial[@]}"; do
    echo
    echo "== peers: $s (limit $(budget "$s") s)"
    run_scenario "$s" tee
done
if [ -n "$parallel" ]; then
    wait "${bg_pids[@]}" || true
    bg_pids=()
    echo
    echo "== peers: keepalive"
    cat "$RUN_DIR/keepalive.out"
fi

# ---- the tally ----------------------------------------------------------------------
passed=0
failed=0
echo
for s in "${scenarios[@]}"; do
    p=$(grep -c '^ok ' "$RUN_DIR/$s.out" || true)
    f=$(grep -c '^FAIL ' "$RUN_DIR/$s.out" || true)
    status="$(cat "$RUN_DIR/$s.status" 2> /dev/null || echo '?')"
    if [ "$status" != 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "FAIL $s: exited with status $status without a FAIL line (see $RUN_DIR/$s.out)"
    fi
    echo "peers $s: $p passed, $f failed (exit $status; logs in $RUN_DIR/$s/)"
    passed=$((passed + p))
    failed=$((failed + f))
done
echo "== peers: $((SECONDS - started)) s in all"
echo "peers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
