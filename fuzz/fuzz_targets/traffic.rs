//! A day of use decoded from the fuzzer's bytes: backends whose moods last
//! (healthy, flaky, failing, hung, down), clients calling tools, then healing;
//! every promise checked after every step, and every backend found again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = tether_core::fuzzing::traffic(data) {
        panic!("{violation}");
    }
});
