#!/usr/bin/env bash
# The macOS check build: `cargo check` and `cargo clippy -D warnings` of the whole
# workspace for x86_64-apple-darwin, on a Linux machine without Apple's SDK. The
# Rust side needs only the rustup target. ring's build compiles a little C, which
# clang (Debian's, installed when missing) compiles for the target freestanding,
# with stand-ins for the three SDK headers it includes (include/ beside this
# script). Nothing is linked: a macOS binary needs Apple's linker and SDK.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=x86_64-apple-darwin
rustup target add "$target"
if ! command -v clang > /dev/null; then
    SUDO=()
    [ "$(id -u)" -eq 0 ] || SUDO=(sudo -n)
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq clang > /dev/null
fi
export CC_x86_64_apple_darwin=clang
export CFLAGS_x86_64_apple_darwin="--target=$target -ffreestanding -nostdinc \
    -isystem $(clang -print-resource-dir)/include -isystem $PWD/tests/macos/include"
cargo check --workspace --all-targets --target "$target"
cargo clippy --workspace --all-targets --target "$target" -- -D warnings
