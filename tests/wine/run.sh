#!/usr/bin/env bash
# The Windows build, run: tether-core's test suite, `tether demo` to the end, and
# the control channel (named pipes: `tether status`, `restart`, `logs` against a
# tether serving stdio), as Windows programs under Wine (Debian's wine64), with
# backends spawned as Windows processes in job objects.
#
# Debian's Wine 8.0 lacks bcryptprimitives.dll, where current Rust std gets its
# random numbers on Windows: a stand-in (bcryptprimitives.c beside this script)
# is compiled with mingw into a Wine prefix of this script's own, under target/.
# Needs the x86_64-pc-windows-gnu target and mingw gcc (.ci/run installs both);
# installs wine64 from Debian's archive when it is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/wine
target=x86_64-pc-windows-gnu

if ! command -v wine > /dev/null; then
    SUDO=()
    [ "$(id -u)" -eq 0 ] || SUDO=(sudo -n)
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq wine64 wine > /dev/null
fi

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
export WINEPREFIX="$target_dir/wine-prefix"
export WINEDEBUG=-all
# No Mono or Gecko installers: nothing here needs them.
export WINEDLLOVERRIDES="mscoree,mshtml="
export WINEARCH=win64
if [ ! -f "$WINEPREFIX/system.reg" ]; then
    echo "-- creating the Wine prefix $WINEPREFIX"
    wine wineboot -i > /dev/null 2>&1 || true
fi
system32="$WINEPREFIX/drive_c/windows/system32"
[ -d "$system32" ] || { echo "wine: no prefix at $WINEPREFIX" >&2; exit 1; }
x86_64-w64-mingw32-gcc -O2 -shared -o "$system32/bcryptprimitives.dll" "$here/bcryptprimitives.c" -ladvapi32
# The wine server outlives each program by a few seconds: stop it at the end.
trap 'wineserver -k > /dev/null 2>&1 || true' EXIT

echo "-- tether-core's tests, as Windows programs"
# insta finds the snapshots through the workspace root, which it cannot ask
# cargo for from inside Wine; it never writes one here.
INSTA_WORKSPACE_ROOT="$PWD" INSTA_UPDATE=no CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine \
    cargo test -q -p tether-core --target "$target"

echo "-- tether demo, as Windows programs"
cargo build -q -p tether-smol --bin tether --target "$target"
exe="$target_dir/$target/debug/tether.exe"
log="$target_dir/wine-demo.log"
if ! timeout 300 wine "$exe" demo > "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "wine: tether demo failed" >&2
    exit 1
fi
# Its milestones: a crashed backend restarted, one that keeps crashing given up
# on, a breaker opened and closed, a remote brought back, the end.
for step in "restarted: files now runs as pid" "server_permanently_failed flaky" "circuit_opened notes" \
    "circuit_closed notes" 'web__echo → "back"' "Demo complete"; do
    if ! grep -qF "$step" "$log"; then
        tail -n 40 "$log" >&2
        echo "wine: the demo's output lacks \"$step\"" >&2
        exit 1
    fi
done
echo "wine: tether demo ran to the end ($(wc -l < "$log") lines)"

echo "-- the control channel over a named pipe, as Windows programs"
work="$target_dir/wine-control"
rm -rf "$work" && mkdir -p "$work"
python3 - "$(winepath -w "$exe")" "$work/config.json" <<'PY'
import json, sys
exe, path = sys.argv[1], sys.argv[2]
json.dump({"mcpServers": {"fs": {"command": exe, "args": ["mock-backend", "--name", "fs"]}}}, open(path, "w"))
PY
# A tether serving stdio, whose client stays for 60 s.
(sleep 60 | timeout 90 wine "$exe" --config "$work/config.json" > "$work/serve.out" 2> "$work/serve.err") &
ask() { timeout 60 wine "$exe" "$@" --config "$work/config.json"; }
for _ in $(seq 1 60); do
    if ask status > "$work/status.txt" 2> "$work/status.err"; then break; fi
    sleep 1
done
if ! grep -qE "^fs +stdio +online" "$work/status.txt"; then
    cat "$work/status.txt" "$work/status.err" "$work/serve.err" >&2
    echo "wine: tether status did not show the backend online over the control channel" >&2
    exit 1
fi
ask restart fs > "$work/restart.txt" || { echo "wine: tether restart failed" >&2; exit 1; }
ask logs fs > "$work/logs.txt" || { echo "wine: tether logs failed" >&2; exit 1; }
if ! grep -q "online -> restarting\|-> connecting" "$work/logs.txt"; then
    cat "$work/logs.txt" >&2
    echo "wine: the restart does not show in tether logs" >&2
    exit 1
fi
if ask restart nope 2> /dev/null; then
    echo "wine: restarting an unknown backend did not fail" >&2
    exit 1
fi
echo "wine: tether status, restart and logs reached a stdio tether over its named pipe"
