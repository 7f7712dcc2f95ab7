#!/usr/bin/env bash
# The performance regression guard: release builds of both tethers, the mock and
# the bench, then `tether-bench --guard tests/bench/guard.json`: it fails when a
# ratio taken within the run (proxy CPU per call against the null relay's, the
# HTTP front's added p50 against direct HTTP's) regressed by more than half
# against its baseline. Ratios, not times: the machine's speed moves both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q --release -p tether-smol -p tether-blocking -p tether-tests
target="${CARGO_TARGET_DIR:-target}"
"$target/release/tether-bench" --runs 3 --calls 1500 --warmup 150 --no-socat --guard tests/bench/guard.json
