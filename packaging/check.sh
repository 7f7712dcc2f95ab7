#!/usr/bin/env bash
# Builds tether's packages for this machine the way the release workflow does, installs
# each where someone without Rust would (the wheel into a fresh virtualenv, the npm
# tarballs into a fresh prefix) and runs `tether demo` from each to the end. Then lints
# the release workflow (its schema, and zizmor's security audits, offline).
#
# Needs python3 (venv, pip), node and npm, and the PyPI registry for maturin, zizmor
# and check-jsonschema (pinned: a new audit must not fail CI by itself). Uses
# CARGO_TARGET_DIR when set.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=${CARGO_TARGET_DIR:-$PWD/target}

echo "-- tools: maturin, check-jsonschema, zizmor, uv (PyPI)"
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 check-jsonschema==0.39.0 zizmor==1.32.0 uv==0.13.9

echo "-- the wheel (maturin, bin bindings, release profile)"
(cd packaging/python && "$work/tools/bin/maturin" build --release --locked --out "$work/wheels")
wheel=$(ls "$work"/wheels/tether_gateway-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"

echo "-- the wheel in a fresh virtualenv: tether demo"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
"$work/venv/bin/tether" --version
"$work/venv/bin/tether" demo > "$work/demo-wheel.log" 2>&1 || { cat "$work/demo-wheel.log"; exit 1; }
tail -n 3 "$work/demo-wheel.log"

echo "-- the README's quick start, copied as it is, with the installed tether: both servers online"
# The first JSON block of "## Run it"; uvx from the tools' virtualenv, npx from node.
python3 - README.md "$work/quickstart.json" <<'PY'
import json, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("\n## Run it\n", 1)[1]
block = re.search(r"```json\n(.*?)```", section, re.S).group(1)
json.loads(block)
open(sys.argv[2], "w", encoding="utf-8").write(block)
PY
(cd "$work" && PATH="$work/tools/bin:$PATH" "$work/venv/bin/tether" check --config quickstart.json) || {
    echo "the README's quick-start configuration does not work as written" >&2
    exit 1
}

echo "-- the npm packages (launcher + this platform's binary) in a fresh prefix: npx tether demo"
bash packaging/npm/pack.sh "$work/npm" "$target/release/tether" > "$work/tarballs"
cat "$work/tarballs"
mkdir "$work/prefix"
# Offline: the platform package given here satisfies the launcher's optional
# dependency; nothing is fetched (the packages are not on the registry yet).
(cd "$work/prefix" && npm install --silent --offline --no-audit --no-fund $(cat "$work/tarballs"))
(cd "$work/prefix" && npx --no-install tether --version)
(cd "$work/prefix" && npx --no-install tether demo > "$work/demo-npm.log" 2>&1) || { cat "$work/demo-npm.log"; exit 1; }
tail -n 3 "$work/demo-npm.log"

echo "-- the release workflow: schema and zizmor (offline)"
"$work/tools/bin/check-jsonschema" --builtin-schema vendor.github-workflows .github/workflows/release.yml
"$work/tools/bin/zizmor" --offline --no-progress .github/workflows/release.yml
