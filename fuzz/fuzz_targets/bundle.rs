//! The export bundle parser on arbitrary input: it must never panic (it checks every length
//! against the bytes left before allocating).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpucache::inspect::parse_bundle(data);
});
