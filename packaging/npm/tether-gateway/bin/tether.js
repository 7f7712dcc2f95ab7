#!/usr/bin/env node
// Runs the `tether` binary of this platform's package (tether-gateway-<os>-<cpu>, an
// optional dependency that npm installs only where its `os` and `cpu` match).
//
// The binary inherits this process's stdin, stdout and stderr: an MCP client that
// spawns `npx tether-gateway serve` talks to tether itself, with no copying in
// between. Signals are passed on, and the exit status is tether's.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

const PLATFORMS = {
  "linux x64": "tether-gateway-linux-x64",
  "linux arm64": "tether-gateway-linux-arm64",
  "darwin x64": "tether-gateway-darwin-x64",
  "darwin arm64": "tether-gateway-darwin-arm64",
  "win32 x64": "tether-gateway-win32-x64",
};

function binaryPath() {
  if (process.env.TETHER_BINARY) return process.env.TETHER_BINARY;
  const key = `${process.platform} ${process.arch}`;
  const pkg = PLATFORMS[key];
  if (!pkg) {
    fail(
      `tether has no prebuilt binary for ${key}. Built ones: ${Object.keys(PLATFORMS).join(", ")}.\n` +
        "Build it from source with Rust (cargo install --git <repository> tether-smol), " +
        "then set TETHER_BINARY to its path."
    );
  }
  const exe = process.platform === "win32" ? "tether.exe" : "tether";
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", exe);
  } catch (_) {
    fail(
      `the package ${pkg}, which carries tether's binary for ${key}, is not installed.\n` +
        "npm skips it when optional dependencies are turned off (--omit=optional, --no-optional) " +
        "or when the lockfile was made on another platform: reinstall without those, " +
        `or install ${pkg} yourself.`
    );
  }
}

function fail(message) {
  process.stderr.write(`tether-gateway: ${message}\n`);
  process.exit(1);
}

const child = spawn(binaryPath(), process.argv.slice(2), { stdio: "inherit", windowsHide: true });
child.on("error", (err) => fail(`cannot start ${err.path || "tether"}: ${err.message}`));
// tether shuts its backends down on SIGINT and SIGTERM; pass them on and let it finish.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  });
}
child.on("exit", (code, signal) => {
  if (signal) {
    // End the way tether ended, so a supervisor sees the same cause.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code === null ? 1 : code);
  }
});
