//! The program cache's decoders on arbitrary bytes: a stored program entry, the program
//! table stream and the histogram stream. None may panic; whatever decodes must encode
//! back to the same bytes (the formats have one encoding per value).
#![no_main]

use gpucache_gl::{decode_program_table, PersistedHistograms, ProgramEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = ProgramEntry::decode(data) {
        assert_eq!(entry.encode(), data);
    }
    if let Ok(table) = decode_program_table(data) {
        assert_eq!(table.len() * 96 + 4, data.len());
    }
    if let Ok(h) = PersistedHistograms::decode(data) {
        let again = PersistedHistograms::decode(&h.encode()).expect("re-decodes");
        assert_eq!(again, h);
    }
});
