#!/usr/bin/env bash
# MCP conformance: runs the server scenarios of the official suite
# (@modelcontextprotocol/conformance) five times, then its client scenarios twice:
#
#   a. baseline: against @modelcontextprotocol/server-everything served directly over
#      Streamable HTTP (the 2025-11-25 requirement set);
#   b. against `tether serve --listen` with server-everything as its stdio backend
#      (2025-11-25);
#   c. against `tether serve --listen` in front of the conformance fixture
#      (tests/src/bin/conformance-fixture/, stdio backend, unprefixed; 2025-11-25);
#   d. as c, with `stateless_clients` on, under the 2026-07-28 requirement set: stateless
#      clients in front, the handshake-era fixture behind;
#   e. as d, with the fixture started as `conformance-fixture --stateless` (a
#      2026-07-28-only backend): stateless clients in front and behind;
#   f. tether as the client under test of the client scenarios (2025-11-25): each
#      scenario server is tether's only remote backend, and client_driver.py plays
#      the MCP client in front of tether and the person at the login page;
#   g. as f, under the 2026-07-28 requirement set (tether speaks the stateless
#      revision to the scenario servers).
#
# It prints each run's passed and failed scenarios, then what a passes and b fails,
# and exits non-zero if b fails a scenario a passes (unless expected-differences.txt
# lists it), or c, d, e, f or g fails a scenario that its allow-list does not list
# (expected-failures.txt, expected-failures-2026-07-28.txt,
# expected-failures-2026-07-28-stateless.txt, expected-failures-client-2025-11-25.txt,
# expected-failures-client-2026-07-28.txt). Each file holds one
# `scenario-name  # reason` per line.
#
# Installs pinned Node 22, the suite and server-everything under tests/conformance/.deps
# (gitignored; idempotent), builds tether and the fixture, picks free ports, and kills
# every process it started on exit. Results and logs go to a temporary directory,
# kept with CONFORMANCE_KEEP=1. CONFORMANCE_TETHER=PATH tests another tether binary.
#
# Needs: the Rust toolchain, node + npm (any version that runs npm: the suite itself
# runs on the pinned Node 22), the npm registry, python3 (the client driver).
#
#   bash tests/conformance/run.sh
set -euo pipefail

# Pinned versions (bump deliberately).
CONFORMANCE_VERSION=0.2.0-alpha.12 # npm: @modelcontextprotocol/conformance; newest; has --requirements
NODE_VERSION=22.23.3               # npm: node (a Node binary); the suite needs Node >= 22
EVERYTHING_VERSION=2026.8.31       # npm: @modelcontextprotocol/server-everything, as tests/interop/run.sh
SPEC_REVISION=2025-11-25           # the suite's requirement set: exactly what this revision requires

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
HERE="$ROOT/tests/conformance"
DEPS="$HERE/.deps"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
# CONFORMANCE_TETHER: another tether binary to test (a release build, say).
TETHER_BIN="${CONFORMANCE_TETHER:-$TARGET_DIR/debug/tether}"
FIXTURE_BIN="$TARGET_DIR/debug/conformance-fixture"
NODE22="$DEPS/node_modules/node/bin/node"
SUITE_CLI="$DEPS/node_modules/@modelcontextprotocol/conformance/dist/index.js"
EVERYTHING_JS="$DEPS/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

fail() {
    echo "conformance: FAILED: $*" >&2
    exit 1
}

need() {
    command -v "$1" > /dev/null 2>&1 || fail "'$1' not found on PATH ($2)"
}

# ---- processes: every one started here is killed on exit ---------------------
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tether-conformance.XXXXXX")"
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
    wait 2> /dev/null || true
    if [ "${CONFORMANCE_KEEP:-0}" = 1 ]; then
        echo "conformance: results and logs kept in $WORK" >&2
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
    "$NODE22" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
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
need node "node and npm install the pinned tooling"
need npm "node and npm install the pinned tooling"
need cargo "the Rust toolchain is required"
need python3 "the client scenarios' driver is a Python script"

installed_version() {
    node -e 'try { console.log(require(process.argv[1]).version) } catch (e) { console.log("") }' "$1"
}
tooling_ok() {
    [ "$(installed_version "$DEPS/node_modules/@modelcontextprotocol/conformance/package.json")" = "$CONFORMANCE_VERSION" ] \
        && [ "$(installed_version "$DEPS/node_modules/@modelcontextprotocol/server-everything/package.json")" = "$EVERYTHING_VERSION" ] \
        && [ "$("$NODE22" --version 2> /dev/null)" = "v$NODE_VERSION" ]
}
if tooling_ok; then
    echo "== conformance: tooling up to date (node $NODE_VERSION, conformance $CONFORMANCE_VERSION, server-everything $EVERYTHING_VERSION)"
else
    echo "== conformance: npm install into tests/conformance/.deps"
    mkdir -p "$DEPS"
    # Its own package.json keeps npm from looking for one further up.
    [ -f "$DEPS/package.json" ] || echo '{ "private": true }' > "$DEPS/package.json"
    npm install --prefix "$DEPS" --save-exact --no-audit --no-fund --no-update-notifier --loglevel=error \
        "node@$NODE_VERSION" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" < /dev/null \
        || fail "npm install of the conformance tooling failed (is the npm registry reachable?)"
    tooling_ok || fail "the pinned tooling is not in $DEPS after npm install"
fi

# ---- builds --------------------------------------------------------------------
echo "== conformance: cargo build -p tether-smol --bin tether"
cargo build -q -p tether-smol --bin tether || fail "cargo build of tether failed"
echo "== conformance: cargo build -p tether-tests --bin conformance-fixture"
cargo build -q -p tether-tests --bin conformance-fixture || fail "cargo build of the conformance fixture failed"
[ -x "$TETHER_BIN" ] || fail "tether binary not found at $TETHER_BIN"
[ -x "$FIXTURE_BIN" ] || fail "fixture binary not found at $FIXTURE_BIN"

# Everything that makes the run fail, reported together at the end.
problems=()

SCENARIOS="$WORK/scenarios.txt"
"$NODE22" "$HERE/results.cjs" scenarios "$DEPS" "$SPEC_REVISION" > "$SCENARIOS" \
    || fail "cannot read the suite's $SPEC_REVISION requirement set"
total=$(wc -l < "$SCENARIOS")

# The scenario names of a `name  # reason` file (comments and blank lines skipped).
listed() {
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e 's/^[[:space:]]*//' "$1" | grep -v '^$' | sort -u || true
}
[ -f "$HERE/suite-skips.txt" ] || fail "$HERE/suite-skips.txt is missing"
listed "$HERE/suite-skips.txt" > "$WORK/suite-skips"
for file in "$HERE/expected-failures.txt" "$HERE/expected-differences.txt"; do
    [ -f "$file" ] || fail "$file is missing"
    while read -r name; do
        grep -qxF "$name" "$SCENARIOS" || problems+=("$(basename "$file") lists '$name', not a scenario of the $SPEC_REVISION set")
    done < <(listed "$file")
done

# ---- one run of the suite ----------------------------------------------------------
# run_suite ID TITLE URL: runs the suite against URL and prints the verdicts;
# leaves NAME<TAB>pass|fail<TAB>reason lines in $WORK/ID.verdicts.
run_suite() {
    local id=$1 title=$2 url=$3
    local out="$WORK/$id-results" log="$WORK/$id-suite.log" status=0
    echo "== conformance: run $id: $title ($url)"
    timeout --kill-after=10 900 "$NODE22" "$SUITE_CLI" server --url "$url" --requirements "$SPEC_REVISION" \
        --output-dir "$out" < /dev/null > "$log" 2>&1 || status=$?
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        fail "run $id: the suite did not finish within 900 s (log: $log)"
    fi
    # Exit status 1 means failed scenarios, read below; anything else is a crash,
    # which the missing results then report scenario by scenario.
    [ "$status" -le 1 ] || echo "conformance: warning: run $id: the suite exited with status $status" >&2
    "$NODE22" "$HERE/results.cjs" verdicts "$out" "$SCENARIOS" > "$WORK/$id.verdicts" \
        || fail "run $id: cannot read the suite's results in $out"
    local passed
    passed=$(grep -c $'\tpass\t' "$WORK/$id.verdicts" || true)
    echo "run $id: $passed/$total scenarios passed"
    print_verdicts "$id"
}

# Prints the verdicts of run $1, passes first (with their warnings, if any).
print_verdicts() {
    awk -F'\t' '$2 == "pass" { print "  pass  " $1 ($3 == "" ? "" : "  (" $3 ")") }' "$WORK/$1.verdicts"
    awk -F'\t' '$2 == "skip" { print "  skip  " $1 "  -- " $3 }' "$WORK/$1.verdicts"
    awk -F'\t' '$2 == "fail" { print "  FAIL  " $1 "  -- " $3 }' "$WORK/$1.verdicts"
}

# The scenarios of run $1 with verdict $2, sorted.
with_verdict() {
    awk -F'\t' -v v="$2" '$2 == v { print $1 }' "$WORK/$1.verdicts" | sort
}

# Writes a tether config with one unprefixed stdio server: config_file PATH NAME COMMAND ARGS...
config_file() {
    local path=$1 name=$2
    shift 2
    "$NODE22" -e '
        const [path, name, command, ...args] = process.argv.slice(1);
        const config = { mcpServers: { [name]: { command, args, tether: { prefixed: false } } } };
        if (process.env.STATELESS_CLIENTS) config.tether = { stateless_clients: true };
        require("fs").writeFileSync(path, JSON.stringify(config, null, 2) + "\n");
    ' "$path" "$name" "$@"
}

# run_tether ID TITLE CONFIG: `tether serve --listen` with CONFIG, then the suite.
run_tether() {
    local id=$1 title=$2 config=$3 port log
    port=$(free_port)
    log="$WORK/$id-tether.log"
    start "$log" "$TETHER_BIN" serve --config "$config" --listen "127.0.0.1:$port"
    local pid=$started
    wait_for_port "$pid" "$port" "$log"
    run_suite "$id" "$title" "http://127.0.0.1:$port/mcp"
    stop_process "$pid"
}


# ---- a: baseline ---------------------------------------------------------------------
port=$(free_port)
start "$WORK/a-everything.log" env PORT="$port" "$NODE22" "$EVERYTHING_JS" streamableHttp
everything_pid=$started
wait_for_port "$everything_pid" "$port" "$WORK/a-everything.log"
run_suite a "baseline: server-everything $EVERYTHING_VERSION over Streamable HTTP" "http://127.0.0.1:$port/mcp"
stop_process "$everything_pid"

# against_allowlist RUN FAILURES ALLOWLIST WHY: each scenario in the file FAILURES is
# either listed in ALLOWLIST (shown with its reason) or a problem ("run RUN fails X, WHY");
# listed scenarios that no longer fail are pointed out.
against_allowlist() {
    local run=$1 failures=$2 allowlist=$3 why=$4 name
    listed "$allowlist" > "$WORK/$run.allowed"
    if [ -s "$failures" ]; then
        while read -r name; do
            if grep -qxF "$name" "$WORK/$run.allowed"; then
                echo "  expected  $name  ($(grep -m1 "^[[:space:]]*$name[[:space:]]*#" "$allowlist" | sed 's/^[^#]*#[[:space:]]*//'))"
            else
                echo "  UNEXPECTED  $name  -- $(awk -F'\t' -v n="$name" '$1 == n { print $3 }' "$WORK/$run.verdicts")"
                problems+=("run $run fails $name, $why")
            fi
        done < "$failures"
    else
        echo "  (none)"
    fi
    # A line whose scenario no longer fails would hide its next regression.
    while read -r name; do
        echo "  STALE  $name  -- listed in $(basename "$allowlist") but no longer fails: remove the line"
        problems+=("run $run: $(basename "$allowlist") lists $name, which no longer fails: remove the line")
    done < <(comm -23 "$WORK/$run.allowed" "$failures")
    check_skips "$run"
}

# check_skips RUN: a scenario whose every check the suite skipped counts as passed
# only when suite-skips.txt names it (the suite skips it by design); a name there
# whose scenario this run ran is stale.
check_skips() {
    local run=$1 name
    while read -r name; do
        if grep -qxF "$name" "$WORK/suite-skips"; then
            echo "  skipped by the suite  $name"
        else
            echo "  UNEXPECTED SKIP  $name  -- $(awk -F'\t' -v n="$name" '$1 == n { print $3 }' "$WORK/$run.verdicts")"
            problems+=("run $run: every check of $name was skipped, and suite-skips.txt does not name it")
        fi
    done < <(with_verdict "$run" skip)
    while read -r name; do
        if awk -F'\t' -v n="$name" '$1 == n && $2 != "skip" { found = 1 } END { exit !found }' "$WORK/$run.verdicts"; then
            problems+=("run $run: suite-skips.txt names $name, which the suite now runs: remove the line")
        fi
    done < "$WORK/suite-skips"
}

# ---- b and c: tether --------------------------------------------------------------------
config_file "$WORK/b-config.json" everything "$NODE22" "$EVERYTHING_JS" stdio
run_tether b "tether --listen, server-everything over stdio" "$WORK/b-config.json"
echo "== conformance: scenarios run a passes and run b fails"
with_verdict a pass > "$WORK/a.pass"
with_verdict b fail > "$WORK/b.fail"
comm -12 "$WORK/a.pass" "$WORK/b.fail" > "$WORK/a-not-b"
against_allowlist b "$WORK/a-not-b" "$HERE/expected-differences.txt" "which the baseline passes"

config_file "$WORK/c-config.json" conformance "$FIXTURE_BIN"
run_tether c "tether --listen, the conformance fixture over stdio" "$WORK/c-config.json"
echo "== conformance: run c failures against expected-failures.txt"
with_verdict c fail > "$WORK/c.fail"
against_allowlist c "$WORK/c.fail" "$HERE/expected-failures.txt" "not listed in expected-failures.txt"

# ---- d: the stateless revision --------------------------------------------------------
# The same fixture (handshake era) behind tether with stateless_clients, under the suite's
# 2026-07-28 requirement set: stateless requests, input_required translation.
SPEC_REVISION=2026-07-28
SCENARIOS="$WORK/scenarios-$SPEC_REVISION.txt"
"$NODE22" "$HERE/results.cjs" scenarios "$DEPS" "$SPEC_REVISION" > "$SCENARIOS" \
    || fail "cannot read the suite's $SPEC_REVISION requirement set"
total=$(wc -l < "$SCENARIOS")
for file in "$HERE/expected-failures-$SPEC_REVISION.txt" "$HERE/expected-failures-$SPEC_REVISION-stateless.txt"; do
    [ -f "$file" ] || fail "$file is missing"
    while read -r name; do
        grep -qxF "$name" "$SCENARIOS" || problems+=("$(basename "$file") lists '$name', not a scenario of the $SPEC_REVISION set")
    done < <(listed "$file")
done
STATELESS_CLIENTS=1 config_file "$WORK/d-config.json" conformance "$FIXTURE_BIN"
run_tether d "tether --listen with stateless_clients, the fixture over stdio, at $SPEC_REVISION" "$WORK/d-config.json"
echo "== conformance: run d failures against expected-failures-$SPEC_REVISION.txt"
with_verdict d fail > "$WORK/d.fail"
against_allowlist d "$WORK/d.fail" "$HERE/expected-failures-$SPEC_REVISION.txt" \
    "not listed in expected-failures-$SPEC_REVISION.txt"

# ---- e: the stateless revision on both sides --------------------------------------------
# The fixture as a 2026-07-28-only backend (`--stateless`: server/discover, per-request
# _meta, input_required results, subscriptions/listen) behind tether with stateless_clients,
# under the same 2026-07-28 requirement set.
STATELESS_CLIENTS=1 config_file "$WORK/e-config.json" conformance "$FIXTURE_BIN" --stateless
run_tether e "tether --listen with stateless_clients, the fixture --stateless over stdio, at $SPEC_REVISION" \
    "$WORK/e-config.json"
echo "== conformance: run e failures against expected-failures-$SPEC_REVISION-stateless.txt"
with_verdict e fail > "$WORK/e.fail"
against_allowlist e "$WORK/e.fail" "$HERE/expected-failures-$SPEC_REVISION-stateless.txt" \
    "not listed in expected-failures-$SPEC_REVISION-stateless.txt"

# ---- f and g: tether as the client under test ---------------------------------------------
# run_client ID REVISION: the suite's client scenarios of REVISION, each scenario server
# tether's only remote backend (client_driver.py starts tether per scenario, logs in
# through tether's loopback redirect, calls the scenario's tools); then the failures
# against expected-failures-client-REVISION.txt.
run_client() {
    local id=$1 revision=$2 status=0
    local out="$WORK/$id-results" log="$WORK/$id-suite.log"
    local scenarios="$WORK/client-scenarios-$revision.txt" allowlist="$HERE/expected-failures-client-$revision.txt"
    "$NODE22" "$HERE/results.cjs" scenarios "$DEPS" "$revision" client > "$scenarios" \
        || fail "cannot read the suite's $revision client requirement set"
    [ -f "$allowlist" ] || fail "$allowlist is missing"
    while read -r name; do
        grep -qxF "$name" "$scenarios" || problems+=("$(basename "$allowlist") lists '$name', not a client scenario of the $revision set")
    done < <(listed "$allowlist")
    echo "== conformance: run $id: tether as the client under test, the $revision client scenarios"
    # The scenarios run concurrently, each with its own tether; the driver keeps
    # every tether's log in $WORK/$id-tether-logs.
    TETHER_BIN="$TETHER_BIN" CONFORMANCE_DRIVER_LOG="$WORK/$id-tether-logs" \
        timeout --kill-after=10 600 "$NODE22" "$SUITE_CLI" client --command "python3 $HERE/client_driver.py" \
        --requirements "$revision" --output-dir "$out" < /dev/null > "$log" 2>&1 || status=$?
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        fail "run $id: the suite did not finish within 600 s (log: $log)"
    fi
    [ "$status" -le 1 ] || echo "conformance: warning: run $id: the suite exited with status $status" >&2
    "$NODE22" "$HERE/results.cjs" verdicts "$out" "$scenarios" client > "$WORK/$id.verdicts" \
        || fail "run $id: cannot read the suite's results in $out"
    echo "run $id: $(grep -c $'\tpass\t' "$WORK/$id.verdicts" || true)/$(wc -l < "$scenarios") scenarios passed"
    print_verdicts "$id"
    echo "== conformance: run $id failures against $(basename "$allowlist")"
    with_verdict "$id" fail > "$WORK/$id.fail"
    against_allowlist "$id" "$WORK/$id.fail" "$allowlist" "not listed in $(basename "$allowlist")"
}
case "$HERE" in *" "*) fail "the client driver's path may not contain spaces (the suite splits --command on spaces): $HERE" ;; esac
run_client f 2025-11-25
run_client g 2026-07-28

# A suite-skips.txt line must name a scenario of some run.
while read -r name; do
    # grep reads the files itself: behind a pipe, its early exit on a match could
    # fail `cat` with SIGPIPE, and pipefail would report a match as none.
    grep -qxF "$name" "$WORK"/scenarios*.txt "$WORK"/client-scenarios-*.txt \
        || problems+=("suite-skips.txt names '$name', a scenario of no run")
done < "$WORK/suite-skips"

if [ "${#problems[@]}" -gt 0 ]; then
    printf '  - %s\n' "${problems[@]}" >&2
    fail "${#problems[@]} problem(s) above"
fi
echo "conformance: OK"
