#!/usr/bin/env bash
# The status page end to end in headless Chromium: starts `tether serve --listen`
# (bearer token on) with two mock stdio backends, `alpha` and `beta`, loads `/` in
# Chromium driven by playwright-core, and runs tests/browser/status_page.test.cjs:
# token prompt (401), a wrong token, both rows online, calls and the sparkline, beta
# crashed through its `crash` tool on /mcp (its policy waits 10 min before a
# restart, so it stays down), the countdown, Restart brings it back, Reconnect, no
# script errors and no request to another origin.
#
# Screenshots go to target/browser/ (status-page.png: beta down, the CI artifact;
# status-page-recovered.png; status-page-failure.png on failure); status-page.png is
# copied to docs/status-page.png for the README only with BROWSER_DOCS=1 (so no run
# changes a tracked file by itself).
#
# With --fake, the same test runs against tests/browser/fake_status_server.cjs (the
# status API contract with scripted data) instead of tether: no Rust build needed.
#
# Installs pinned playwright-core under tests/browser/.deps (gitignored; idempotent)
# and Debian's chromium with apt-get when /usr/bin/chromium is missing (sudo when not
# root). CHROMIUM=PATH uses another Chromium. Kills every process it started on exit
# (tether and its backends, the fake, node, Chromium). Logs go to a temporary
# directory, kept with BROWSER_KEEP=1.
#
# Needs: node (>= 18) + npm and the npm registry; apt-get and Debian's archive when
# Chromium is missing; the Rust toolchain unless --fake.
#
#   bash tests/browser/run.sh [--fake]
set -euo pipefail

# Pinned versions (bump deliberately).
PLAYWRIGHT_VERSION=1.65.1 # npm: playwright-core; drives the system Chromium (no browser download)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
HERE="$ROOT/tests/browser"
DEPS="$HERE/.deps"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
OUT="$TARGET_DIR/browser"
TETHER_BIN="$TARGET_DIR/debug/tether"
MOCK_BIN="$TARGET_DIR/debug/mock-mcp"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
TOKEN="status-page-test-token-$RANDOM$RANDOM"

MODE=real
for arg in "$@"; do
    case "$arg" in
        --fake) MODE=fake ;;
        *)
            echo "usage: bash tests/browser/run.sh [--fake]" >&2
            exit 2
            ;;
    esac
done

fail() {
    echo "browser: FAILED: $*" >&2
    exit 1
}

need() {
    command -v "$1" > /dev/null 2>&1 || fail "'$1' not found on PATH ($2)"
}

# ---- processes: every one started here is killed on exit ---------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tether-browser.XXXXXX")"
CHROMIUM_PID_FILE="$WORK/chromium.pid"
started_pids=()

stop_process() {
    local pid=$1
    kill -0 "$pid" 2> /dev/null || return 0
    # SIGTERM first: tether then kills its backends' process groups itself.
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2> /dev/null || return 0
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null || true
}

cleanup() {
    local status=$?
    for pid in "${started_pids[@]}"; do
        stop_process "$pid"
    done
    # Playwright starts Chromium in a process group of its own; it closes it, unless
    # node died first.
    if [ -s "$CHROMIUM_PID_FILE" ]; then
        stop_process "$(cat "$CHROMIUM_PID_FILE")"
    fi
    wait 2> /dev/null || true
    if [ "${BROWSER_KEEP:-0}" = 1 ] || [ "$status" -ne 0 ]; then
        echo "browser: logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts "$@" in the background in its own process group (so stop_process reaches
# its children too), output to log file $1; sets $started.
start() {
    local log=$1
    shift
    if command -v setsid > /dev/null 2>&1; then
        setsid "$@" < /dev/null > "$log" 2>&1 &
    else
        "$@" < /dev/null > "$log" 2>&1 &
    fi
    started=$!
    started_pids+=("$started")
}

free_port() {
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Waits until 127.0.0.1:$2 accepts connections, while process $1 lives (log $3).
wait_for_port() {
    local pid=$1 port=$2 log=$3
    for _ in $(seq 300); do
        if (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; then
            return 0
        fi
        if ! kill -0 "$pid" 2> /dev/null; then
            tail -n 20 "$log" >&2 || true
            fail "the server (log above) exited before listening on port $port"
        fi
        sleep 0.1
    done
    tail -n 20 "$log" >&2 || true
    fail "nothing listens on port $port after 30 s (log above)"
}

# ---- tooling -------------------------------------------------------------------
need node "node runs the test and npm installs playwright-core"
need npm "node runs the test and npm installs playwright-core"

installed_version() {
    node -e 'try { console.log(require(process.argv[1]).version) } catch (e) { console.log("") }' "$1"
}
if [ "$(installed_version "$DEPS/node_modules/playwright-core/package.json")" = "$PLAYWRIGHT_VERSION" ]; then
    echo "== browser: tooling up to date (playwright-core $PLAYWRIGHT_VERSION)"
else
    echo "== browser: npm install into tests/browser/.deps"
    mkdir -p "$DEPS"
    # Its own package.json keeps npm from looking for one further up.
    [ -f "$DEPS/package.json" ] || echo '{ "private": true }' > "$DEPS/package.json"
    npm install --prefix "$DEPS" --save-exact --no-audit --no-fund --no-update-notifier --loglevel=error \
        "playwright-core@$PLAYWRIGHT_VERSION" < /dev/null \
        || fail "npm install of playwright-core failed (is the npm registry reachable?)"
    [ "$(installed_version "$DEPS/node_modules/playwright-core/package.json")" = "$PLAYWRIGHT_VERSION" ] \
        || fail "playwright-core $PLAYWRIGHT_VERSION is not in $DEPS after npm install"
fi

if [ ! -x "$CHROMIUM" ]; then
    [ "$CHROMIUM" = /usr/bin/chromium ] || fail "CHROMIUM=$CHROMIUM is not an executable"
    need apt-get "Chromium is installed from Debian's package 'chromium'"
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        need sudo "installing Debian's chromium needs root"
        SUDO=(sudo -n)
    fi
    echo "== browser: apt-get install chromium"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq < /dev/null > "$WORK/apt.log" 2>&1 || {
        tail -n 20 "$WORK/apt.log" >&2
        fail "apt-get update failed (log above)"
    }
    "${SUDO[@]}" apt-get install -y -qq chromium < /dev/null >> "$WORK/apt.log" 2>&1 || {
        tail -n 20 "$WORK/apt.log" >&2
        fail "apt-get install chromium failed (log above)"
    }
    [ -x "$CHROMIUM" ] || fail "no $CHROMIUM after apt-get install chromium"
fi
echo "== browser: $("$CHROMIUM" --version 2> /dev/null | head -n 1)"

# ---- the server ------------------------------------------------------------------
PORT="$(free_port)"
SERVER_LOG="$WORK/server.log"
if [ "$MODE" = fake ]; then
    echo "== browser: the fake status server (tests/browser/fake_status_server.cjs)"
    start "$SERVER_LOG" node "$HERE/fake_status_server.cjs" --port "$PORT" --token "$TOKEN"
else
    need cargo "the Rust toolchain builds tether and mock-mcp (or run with --fake)"
    echo "== browser: cargo build -p tether-smol --bin tether -p tether-tests --bin mock-mcp"
    cargo build -q -p tether-smol --bin tether -p tether-tests --bin mock-mcp || fail "cargo build failed"
    [ -x "$TETHER_BIN" ] || fail "tether binary not found at $TETHER_BIN"
    [ -x "$MOCK_BIN" ] || fail "mock-mcp binary not found at $MOCK_BIN"
    # beta waits 10 min before restarting after a crash (also when it ran > 60 s), so
    # the test sees it down until it clicks Restart.
    cat > "$WORK/config.json" << EOF
{
  "mcpServers": {
    "alpha": { "command": "$MOCK_BIN", "args": ["--name", "alpha"] },
    "beta": { "command": "$MOCK_BIN", "args": ["--name", "beta"],
              "tether": { "policy": { "restart_delays_ms": [600000], "restart_immediately_after_ms": 3600000 } } }
  }
}
EOF
    echo "== browser: tether serve --listen 127.0.0.1:$PORT (bearer token on)"
    TETHER_AUTH_TOKEN="$TOKEN" start "$SERVER_LOG" "$TETHER_BIN" serve --listen "127.0.0.1:$PORT" \
        --config "$WORK/config.json" --log-level info
fi
SERVER_PID=$started
wait_for_port "$SERVER_PID" "$PORT" "$SERVER_LOG"

# ---- the test --------------------------------------------------------------------
echo "== browser: status_page.test.cjs against http://127.0.0.1:$PORT/ ($MODE)"
mkdir -p "$OUT"
rm -f "$OUT"/status-page*.png
STATUS_MODE="$MODE" STATUS_URL="http://127.0.0.1:$PORT" STATUS_TOKEN="$TOKEN" STATUS_CRASH=beta STATUS_OTHER=alpha \
    CHROMIUM="$CHROMIUM" PLAYWRIGHT_CORE="$DEPS/node_modules/playwright-core" BROWSER_OUT="$OUT" \
    CHROMIUM_PID_FILE="$CHROMIUM_PID_FILE" \
    start "$WORK/test.log" node "$HERE/status_page.test.cjs"
TEST_PID=$started
status=0
wait "$TEST_PID" || status=$?
cat "$WORK/test.log"
if [ "$status" -ne 0 ]; then
    echo "---- server log (last 40 lines) ----" >&2
    tail -n 40 "$SERVER_LOG" >&2 || true
    fail "the status page test failed ($MODE mode; screenshots in $OUT)"
fi
[ -s "$OUT/status-page.png" ] || fail "no screenshot at $OUT/status-page.png"
if [ "${BROWSER_DOCS:-0}" = 1 ] && [ "$MODE" = real ]; then
    mkdir -p "$ROOT/docs"
    cp "$OUT/status-page.png" "$ROOT/docs/status-page.png"
fi
echo "== browser: passed ($MODE mode); screenshot: $OUT/status-page.png"
