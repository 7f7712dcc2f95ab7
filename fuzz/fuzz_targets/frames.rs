//! Arbitrary bytes as client and backend byte streams, through the codecs and
//! the gateway.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = tether_core::fuzzing::frames(data) {
        panic!("{violation}");
    }
});
