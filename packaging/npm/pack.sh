#!/usr/bin/env bash
# Packs tether's npm packages: tether-gateway (the launcher, every platform's package
# as an optional dependency) and tether-gateway-<os>-<cpu> (one platform's binary).
#
#   packaging/npm/pack.sh OUT_DIR BINARY [OS-CPU]
#
# OS-CPU is in Node's names (linux-x64, linux-arm64, darwin-x64, darwin-arm64,
# win32-x64), by default this machine's. The version is the workspace's. Writes the
# two .tgz files to OUT_DIR; the release workflow runs it once per platform and
# publishes the launcher once.
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
binary=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
platform=${3:-$(node -p 'process.platform + "-" + process.arch')}
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -1)
[ -n "$version" ] || { echo "pack.sh: no version in Cargo.toml" >&2; exit 1; }
[ -f "$binary" ] || { echo "pack.sh: no binary at $binary" >&2; exit 1; }
os=${platform%-*}
cpu=${platform#*-}
case "$platform" in
    linux-x64|linux-arm64|darwin-x64|darwin-arm64|win32-x64) ;;
    *) echo "pack.sh: no package for platform $platform" >&2; exit 1 ;;
esac
exe=tether
[ "$os" = win32 ] && exe=tether.exe

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The launcher, with every version (its own and its optional dependencies') stamped.
cp -R "$here/tether-gateway" "$work/launcher"
node -e '
  const fs = require("fs"), file = process.argv[1], version = process.argv[2];
  const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
  pkg.version = version;
  for (const name of Object.keys(pkg.optionalDependencies)) pkg.optionalDependencies[name] = version;
  fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
' "$work/launcher/package.json" "$version"
cp "$here/../../LICENSE-MIT" "$here/../../LICENSE-APACHE" "$work/launcher/"

# The platform's package: the binary, and `os`/`cpu` so npm installs it only there.
mkdir -p "$work/platform/bin"
cp "$binary" "$work/platform/bin/$exe"
chmod 755 "$work/platform/bin/$exe"
cp "$here/../../LICENSE-MIT" "$here/../../LICENSE-APACHE" "$work/platform/"
node -e '
  const fs = require("fs"), [file, version, os, cpu, exe] = process.argv.slice(1);
  const pkg = {
    name: `tether-gateway-${os}-${cpu}`,
    version,
    description: `The tether binary for ${os} ${cpu}; install tether-gateway, which runs it.`,
    license: "MIT OR Apache-2.0",
    os: [os],
    cpu: [cpu],
    files: [`bin/${exe}`, "LICENSE-MIT", "LICENSE-APACHE"],
    preferUnplugged: true,
  };
  fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
' "$work/platform/package.json" "$version" "$os" "$cpu" "$exe"
echo "tether's binary for $os $cpu. Install \`tether-gateway\`, which runs it." > "$work/platform/README.md"

(cd "$work/launcher" && npm pack --silent --pack-destination "$out" > /dev/null)
(cd "$work/platform" && npm pack --silent --pack-destination "$out" > /dev/null)
echo "$out/tether-gateway-$version.tgz"
echo "$out/tether-gateway-$os-$cpu-$version.tgz"
