//! The fuzz corpora and every input that ever broke a promise, replayed through
//! the same drivers on the stable toolchain, so CI guards them without a fuzzer.
//!
//! `fuzz/corpus/<target>/` holds the (minimised) corpora, `fuzz/regressions/<target>/`
//! the inputs that once failed. `cargo test -p tether-core --test fuzz_corpus --
//! --ignored write_seed_corpora` regenerates the seeds from the scenario snapshots.

use std::fs;
use std::path::{Path, PathBuf};

use tether_core::fuzzing;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The inputs under `fuzz/<kind>/<target>/`. A corpus directory must be there
/// and hold inputs (a moved or emptied one would otherwise replay nothing and
/// pass); `fuzz/regressions/` must be there, a target may have none yet.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e)
            if kind == "regressions" && fuzz_dir().join(kind).is_dir() && e.kind() == std::io::ErrorKind::NotFound =>
        {
            return Vec::new();
        }
        Err(e) => panic!("cannot read {}: {e}", dir.display()),
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    assert!(kind != "corpus" || !files.is_empty(), "{} holds no inputs", dir.display());
    files
}

fn replay(target: &str, run: fn(&[u8]) -> Result<(), String>) -> usize {
    let mut count = 0;
    for kind in ["corpus", "regressions"] {
        for path in inputs(kind, target) {
            let data = fs::read(&path).unwrap();
            if let Err(violation) = run(&data) {
                panic!("{} broke a promise: {violation}", path.display());
            }
            count += 1;
        }
    }
    count
}

#[test]
fn gateway_corpus_keeps_every_promise() {
    let n = replay("gateway", fuzzing::gateway);
    assert!(n > 0, "no gateway corpus found under {}", fuzz_dir().display());
}

#[test]
fn traffic_corpus_keeps_every_promise() {
    let n = replay("traffic", fuzzing::traffic);
    assert!(n > 0, "no traffic corpus found under {}", fuzz_dir().display());
}

#[test]
fn frames_corpus_keeps_every_promise() {
    let n = replay("frames", fuzzing::frames);
    assert!(n > 0, "no frames corpus found under {}", fuzz_dir().display());
}

/// Encodes frames for the `frames` driver: each chunk is (target, length, bytes).
fn encode_frames(frames: &[(u8, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (target, frame) in frames {
        let text = match target {
            2 => format!("data: {frame}\n\n"),
            _ => format!("{frame}\n"),
        };
        for chunk in text.as_bytes().chunks(96) {
            out.push(*target);
            out.push(chunk.len() as u8);
            out.extend_from_slice(chunk);
        }
    }
    out
}

/// Seeds the `frames` corpus with the frames of every scenario transcript, and the
/// `gateway` corpus with a few PRNG episodes.
#[test]
#[ignore]
fn write_seed_corpora() {
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let out = fuzz_dir().join("corpus/frames");
    fs::create_dir_all(&out).unwrap();
    for entry in fs::read_dir(&snapshots).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let mut frames = Vec::new();
        for line in text.lines() {
            let Some((_, input)) = line.split_once("] > ") else { continue };
            if input.ends_with('…') {
                continue;
            }
            let Some((who, frame)) = input.split_once(" -> ") else { continue };
            let target = if who.starts_with("client") {
                0
            } else if who.starts_with("web") {
                2
            } else {
                1
            };
            frames.push((target, frame.to_string()));
        }
        if !frames.is_empty() {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            fs::write(out.join(format!("seed-{name}")), encode_frames(&frames)).unwrap();
        }
    }
    let out = fuzz_dir().join("corpus/gateway");
    fs::create_dir_all(&out).unwrap();
    for seed in 0..16u64 {
        let mut rng = tether_core::Rng::new(seed);
        let data: Vec<u8> = (0..400).map(|_| rng.next_u64() as u8).collect();
        fs::write(out.join(format!("seed-prng-{seed}")), data).unwrap();
    }
}
