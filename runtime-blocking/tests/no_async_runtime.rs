//! tether-blocking promises hosts without an async runtime that it brings none:
//! no executor, reactor or async I/O crate may appear among its (normal)
//! dependencies.

use std::process::Command;

/// Crates that are, or exist to drive, an async runtime.
const ASYNC_RUNTIMES: &[&str] = &[
    "tokio",
    "smol",
    "async-std",
    "async-io",
    "async-executor",
    "async-global-executor",
    "async-process",
    "async-channel",
    "async-net",
    "async-fs",
    "blocking",
    "futures-executor",
    "futures-lite",
    "polling",
    "mio",
    "hyper",
    "smol-hyper",
    "async-signal",
];

#[test]
fn no_async_runtime_in_the_dependency_tree() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "-p", "tether-blocking", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).expect("utf-8");
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"tether-core") && crates.contains(&"ureq"), "unexpected tree:\n{tree}");
    let found: Vec<&&str> = ASYNC_RUNTIMES.iter().filter(|name| crates.contains(name)).collect();
    assert!(found.is_empty(), "async runtime crates in tether-blocking's tree: {found:?}\n{tree}");
}
