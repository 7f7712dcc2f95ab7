//! Randomised episodes through the fuzz drivers (`gateway`, `traffic`,
//! `frames`): PRNG bytes instead of a fuzzer's. Every input is checked against
//! the engine's invariants, and after each episode every client request must
//! have exactly one answer.
//!
//! `STRESS_EPISODES=N cargo test --release -p tether-core --test stress` runs more;
//! a failing episode's bytes are written to `target/stress-failures/` so they can
//! be kept in `fuzz/regressions/`.

use tether_core::fuzzing;
use tether_core::Rng;

fn bytes(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let len = 64 + (rng.next_u64() % 1500) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn run(name: &str, target: fn(&[u8]) -> Result<(), String>, episodes: u64) {
    run_with(name, &mut |data: &[u8]| target(data), episodes);
}

fn run_with(name: &str, target: &mut dyn FnMut(&[u8]) -> Result<(), String>, episodes: u64) {
    for seed in 0..episodes {
        let data = bytes(seed ^ 0x5eed);
        // A panic (a debug assertion in the engine) breaks a promise too: the
        // input is kept like any other failure's.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(&data)))
            .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&*panic))));
        if let Err(violation) = outcome {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/stress-failures");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{name}-{seed}"));
            let _ = std::fs::write(&path, &data);
            panic!("{name} episode {seed} broke a promise: {violation}\n(input saved to {})", path.display());
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".into(),
    }
}

fn episodes() -> u64 {
    std::env::var("STRESS_EPISODES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000)
}

/// Runs `driver` over the default episodes and returns what they reached, printed
/// (`cargo test -- --nocapture` shows it).
fn reached(name: &str, driver: fn(&[u8]) -> Result<fuzzing::Coverage, String>) -> fuzzing::Coverage {
    let mut total = fuzzing::Coverage::default();
    let mut count = |data: &[u8]| {
        total.add(&driver(data)?);
        Ok(())
    };
    run_with(name, &mut count, episodes());
    println!("{name} episodes reached: {total}");
    total
}

/// Fails unless every one of `paths` was reached.
fn assert_reached(name: &str, total: &fuzzing::Coverage, paths: &[(&str, u64)]) {
    for (path, n) in paths {
        assert!(*n > 0, "the {name} driver never reached {path}: {total}");
    }
}

#[test]
fn random_input_sequences_keep_every_promise() {
    let total = reached("gateway", fuzzing::gateway_coverage);
    // Breaker trips are not among the paths held here: these arbitrary inputs
    // fail calls in too scattered a way to trip one (the traffic driver does).
    let paths = [
        ("successful calls", total.calls_ok),
        ("failed calls", total.calls_failed),
        ("restarts", total.restarts),
        ("reconnects", total.reconnects),
        ("tasks", total.tasks),
    ];
    assert_reached("gateway", &total, &paths);
}

#[test]
fn random_byte_streams_keep_every_promise() {
    run("frames", fuzzing::frames, episodes());
}

#[test]
fn a_day_of_traffic_keeps_every_promise() {
    let total = reached("traffic", fuzzing::traffic_coverage);
    // This driver is for the paths the arbitrary one rarely walks: most calls
    // succeed, breakers open and close again, crash loops give up.
    assert!(total.calls_ok > total.calls_failed + total.calls_tool_error, "most calls must succeed: {total}");
    let paths = [
        ("tool errors", total.calls_tool_error),
        ("breakers opening", total.breaker_opened),
        ("breakers closing", total.breaker_closed),
        ("restarts", total.restarts),
        ("reconnects", total.reconnects),
        ("giving up", total.gave_up),
        ("tasks", total.tasks),
    ];
    assert_reached("traffic", &total, &paths);
}
