//! Arbitrary sequences of inputs (decoded from the fuzzer's bytes) through the
//! gateway, with every invariant checked after every step.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = tether_core::fuzzing::gateway(data) {
        panic!("{violation}");
    }
});
