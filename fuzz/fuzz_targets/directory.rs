//! A cache directory whose files are arbitrary bytes: opening it, reading every key named in
//! the input and writing to it must never panic, and a value read back must be one written.
//! A quarter of the inputs also get a hash table the open trusts, whose page is input bytes
//! (its CRC made sound half of those times): hostile slots are served through it.
#![no_main]

use gpucache::fuzzing::{
    encode_meta, encode_segment_header, trusted_table_for_fuzzing, SegmentFile,
};
use gpucache::Identity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temporary directory");
    // A valid meta file for the default identity, so the segments are parsed rather than
    // wiped; the input is split into an index file and a data file, each behind a valid
    // header half of the time.
    let meta = encode_meta(&Identity::default());
    let (idx, dat) = data.split_at(data.len() / 2);
    let with_header = |kind, body: &[u8]| {
        let mut file = Vec::new();
        if body.first().is_some_and(|b| b & 1 == 0) {
            file.extend_from_slice(&encode_segment_header(kind, 1));
        }
        file.extend_from_slice(body);
        file
    };
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
    write("meta", &meta);
    write("seg-00000001.idx", &with_header(SegmentFile::Index, idx));
    write("seg-00000001.dat", &with_header(SegmentFile::Data, dat));
    let flags = data.last().copied().unwrap_or(0);
    if flags & 6 == 6 {
        let table = trusted_table_for_fuzzing(dir.path(), dat, flags & 8 != 0).unwrap();
        write("seg-table.hix", &table);
    }
    let cache = gpucache::Cache::builder()
        .directory(dir.path())
        .preload(true)
        .open()
        .expect("open never fails for a directory");
    cache.wait_for_preload();
    for key in data.chunks(20).take(64) {
        let _ = cache.get(key);
    }
    cache.insert(b"fuzz", b"value".to_vec()).expect("store");
    cache.flush().ok();
    assert_eq!(cache.get(b"fuzz").as_deref(), Some(&b"value"[..]));
    cache.validate();
});
