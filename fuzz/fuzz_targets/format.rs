//! Every decoder of on-disk bytes, on arbitrary input: none may panic, and whatever decodes
//! must re-encode to the bytes it came from (checked through the CRC the decoder verified).
#![no_main]

use gpucache::fuzzing::{
    decode_index_entry, decode_meta, decode_record, decode_segment_header, decode_table_header,
    decode_table_page, decompress_value, encode_table_header, find_in_table_page, record_value,
    SegmentFile, SLOTS_PER_PAGE,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_meta(data);
    let _ = decode_segment_header(SegmentFile::Data, data);
    let _ = decode_segment_header(SegmentFile::Index, data);
    let _ = decode_index_entry(data);
    if let Ok(header) = decode_record(data, 1 << 20) {
        assert!(header.record_len() as usize <= data.len());
        // A sound record's compressed value: bounded by the declared length, never a panic.
        if let Ok(value) = record_value(data, &header, 1 << 20) {
            assert!(value.len() <= 1 << 20);
        }
    }
    // The hash table's header and pages (`seg-table.hix`): a header re-encodes to the bytes
    // its CRC covers; a page never claims more slots than it holds.
    if let Ok(header) = decode_table_header(data) {
        let covered = 48 + header.segs.len() * 40 + header.meta.len() + 4;
        assert!(header.header_len as usize <= data.len());
        assert_eq!(encode_table_header(&header)[..covered], data[..covered]);
    }
    // A lookup (which decodes one slot) agrees with the whole page decoded, for a hash the
    // page holds and for one it may not.
    match decode_table_page(data) {
        Ok((slots, overflowed)) => {
            assert!(slots.len() <= SLOTS_PER_PAGE);
            for hash in slots.first().map(|s| s.hash).into_iter().chain([0x5eed]) {
                let first = slots.iter().find(|s| s.hash == hash).copied();
                assert_eq!(find_in_table_page(data, hash), Ok((first, overflowed)));
            }
        }
        Err(e) => assert_eq!(find_in_table_page(data, 0x5eed), Err(e)),
    }
    // Hostile compressed values on their own (`raw_len:u32`, then an LZ4 block).
    if let Ok(value) = decompress_value(data, 1 << 16) {
        assert!(value.len() <= 1 << 16);
    }
});
