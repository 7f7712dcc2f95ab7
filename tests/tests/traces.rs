//! Recorded traces replayed as regression tests.
//!
//! Every `tests/traces/*.jsonl` (written by `tether --record FILE`) is run through
//! a fresh engine and its actions are pinned as an insta snapshot. To turn a
//! production problem into a test: record it, drop the file here, run
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test -p tether-tests --test
//! traces`), and check the transcript shows what should have happened.

use std::path::Path;

#[test]
fn recorded_traces_replay_to_their_pinned_actions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/traces")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no traces in {}", dir.display());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let first = tether_core::trace::replay(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let second = tether_core::trace::replay(&text).unwrap();
        assert_eq!(first, second, "{}: replay is not deterministic", path.display());
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        insta::assert_snapshot!(name, tether_core::trace::render(&first));
    }
}
