//! The on-disk format, version 2: encoding and checked decoding of every structure of a
//! cache directory. Every other part of the disk tier reads records and entries through the
//! functions here.
//!
//! All integers are little-endian (read and written with [`crate::codec`]); every structure
//! carries a CRC32C. `docs/disk-format.md` is the human description; the golden-byte tests
//! below fail when the bytes change. Decoders never trust a length before checking it
//! against a bound, so hostile files cost no more than their own size.

use crate::codec::{strip_crc32c, FormatError, LeReader, LeWriter};
use crate::identity::MAX_IDENTITY_LEN;
use crate::Identity;

/// Bumped on any incompatible change; a directory of another version is wiped.
/// Version 2 shrank records and index entries (12 and 24 bytes) and added compression.
pub const FORMAT_VERSION: u32 = 2;

pub const META_MAGIC: [u8; 8] = *b"GPUCMETA";
pub const DATA_MAGIC: [u8; 8] = *b"GPUCDATA";
pub const INDEX_MAGIC: [u8; 8] = *b"GPUCINDX";

/// Size of a segment file header (data and index files alike).
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of a record header in a data file.
pub const RECORD_HEADER_LEN: usize = 12;
/// Size of an index entry.
pub const INDEX_ENTRY_LEN: usize = 24;
/// Longest key persisted; longer keys stay in memory only.
pub const MAX_KEY_LEN: usize = u16::MAX as usize;

/// Record flag: the key was removed.
pub const FLAG_TOMBSTONE: u32 = 1;
/// Record flag: the stored value is `raw_len:u32` then an LZ4 block of `raw_len` bytes.
pub const FLAG_LZ4: u32 = 2;
const KNOWN_RECORD_FLAGS: u32 = FLAG_TOMBSTONE | FLAG_LZ4;
/// Values shorter than this are stored as they are: LZ4 rarely saves on them.
pub const COMPRESS_MIN_LEN: usize = 64;
/// Meta flag: the cache is versioned by driver identity (kept side by side per identity).
pub const META_FLAG_DRIVER_VERSIONED: u32 = 1;
const META_HEADER_LEN: usize = 32;

/// The key hash stored on disk: XXH3-64 with seed 0, the same in every process and version.
pub fn disk_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

// ---------------------------------------------------------------------------------------
// Meta file: the identity that owns a directory.

/// Layout: `magic[8] format_version:u32 flags:u32 cache_version:u64 identity_len:u32
/// reserved:u32 identity[identity_len] crc32c:u32` (the CRC covers everything before it).
pub fn encode_meta(identity: &Identity) -> Vec<u8> {
    let bytes = identity.bytes();
    let flags = if identity.driver_versioned() {
        META_FLAG_DRIVER_VERSIONED
    } else {
        0
    };
    let mut b = Vec::with_capacity(META_HEADER_LEN + bytes.len() + 4);
    LeWriter::new(&mut b)
        .bytes(&META_MAGIC)
        .u32(FORMAT_VERSION)
        .u32(flags)
        .u64(identity.version())
        .u32(bytes.len() as u32)
        .u32(0)
        .bytes(bytes)
        .crc32c_from(0);
    b
}

/// Checks and decodes a meta file. Unknown flags are refused: the directory was written by
/// a newer build, and this one cannot honour them.
pub fn decode_meta(b: &[u8]) -> Result<Identity, FormatError> {
    let mut r = LeReader::new(b);
    if r.array::<8>()? != META_MAGIC {
        return Err(FormatError::BadMagic);
    }
    let (version, flags, cache_version) = (r.u32()?, r.u32()?, r.u64()?);
    let identity_len = r.u32()? as usize;
    if identity_len > MAX_IDENTITY_LEN {
        return Err(FormatError::Invalid("identity length"));
    }
    r.skip(4)?;
    if b.len() != META_HEADER_LEN + identity_len + 4 {
        return Err(FormatError::Truncated);
    }
    strip_crc32c(b)?;
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    if flags & !META_FLAG_DRIVER_VERSIONED != 0 {
        return Err(FormatError::Invalid("meta flags"));
    }
    Ok(Identity::new(r.bytes(identity_len)?)
        .with_version(cache_version)
        .with_driver_versioned(flags & META_FLAG_DRIVER_VERSIONED != 0))
}

// ---------------------------------------------------------------------------------------
// Segment file headers.

/// Which file of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFile {
    /// The data file (`.dat`): records.
    Data,
    /// The index file (`.idx`): fixed-size entries.
    Index,
}

impl SegmentFile {
    fn magic(self) -> [u8; 8] {
        match self {
            SegmentFile::Data => DATA_MAGIC,
            SegmentFile::Index => INDEX_MAGIC,
        }
    }
}

/// Layout: `magic[8] format_version:u32 segment_id:u32 reserved[12] crc32c:u32` (CRC over
/// bytes 0..28).
pub fn encode_segment_header(kind: SegmentFile, segment_id: u32) -> [u8; SEGMENT_HEADER_LEN] {
    let mut b = Vec::with_capacity(SEGMENT_HEADER_LEN);
    LeWriter::new(&mut b)
        .bytes(&kind.magic())
        .u32(FORMAT_VERSION)
        .u32(segment_id)
        .bytes(&[0; 12])
        .crc32c_from(0);
    b.try_into().expect("32 bytes")
}

/// Checks a segment header; returns its segment id.
pub fn decode_segment_header(kind: SegmentFile, b: &[u8]) -> Result<u32, FormatError> {
    let mut r = LeReader::new(b);
    if r.array::<8>()? != kind.magic() {
        return Err(FormatError::BadMagic);
    }
    let (version, id) = (r.u32()?, r.u32()?);
    strip_crc32c(b.get(..SEGMENT_HEADER_LEN).ok_or(FormatError::Truncated)?)?;
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    Ok(id)
}

// ---------------------------------------------------------------------------------------
// Records (data files) and index entries.

/// What a record or index entry says about one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Not stored in records (computed from the key); stored in index entries.
    pub key_hash: u64,
    pub key_len: u32,
    /// Bytes of the value as stored (compressed when `flags` has [`FLAG_LZ4`]).
    pub value_len: u32,
    pub flags: u32,
}

impl RecordHeader {
    pub fn for_entry(key: &[u8], value_len: usize, flags: u32) -> Self {
        Self {
            key_hash: disk_hash(key),
            key_len: key.len() as u32,
            value_len: value_len as u32,
            flags,
        }
    }

    /// Bytes the whole record takes in the data file.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN as u64 + u64::from(self.key_len) + u64::from(self.value_len)
    }

    pub fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }

    pub fn is_compressed(&self) -> bool {
        self.flags & FLAG_LZ4 != 0
    }

    /// Flags this build knows, in a combination that makes sense.
    fn flags_valid(&self) -> bool {
        self.flags & !KNOWN_RECORD_FLAGS == 0 && !(self.is_tombstone() && self.is_compressed())
    }
}

/// The value as it is stored for `value`: LZ4-compressed (with [`FLAG_LZ4`]) when that saves
/// at least 1/32 of it, else as it is (`None`). Values under [`COMPRESS_MIN_LEN`] are not
/// tried; of values of 4 KiB and more the first KiB is tried first, and an incompressible
/// one is stored as it is (the writer then costs a quarter or less of a full attempt).
pub fn compress_value(value: &[u8]) -> Option<Vec<u8>> {
    if value.len() < COMPRESS_MIN_LEN || value.len() > u32::MAX as usize {
        return None;
    }
    if value.len() >= 4096 {
        let probe = lz4_flex::block::compress(&value[..1024]);
        if probe.len() > 1024 - 1024 / 32 {
            return None;
        }
    }
    let block = lz4_flex::block::compress(value);
    let stored = 4 + block.len();
    if stored > value.len() - value.len() / 32 {
        return None;
    }
    let mut out = Vec::with_capacity(stored);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&block);
    Some(out)
}

/// The value of a record that [`decode_record`] accepted, decompressed if it was stored
/// compressed. `max_len` bounds the declared raw length, and with it the allocation: hostile
/// bytes cost no more than `max_len`.
pub fn record_value<'a>(
    record: &'a [u8],
    header: &RecordHeader,
    max_len: u64,
) -> Result<std::borrow::Cow<'a, [u8]>, FormatError> {
    let (_, stored) = record_key_value(record, header);
    if !header.is_compressed() {
        return Ok(std::borrow::Cow::Borrowed(stored));
    }
    decompress_value(stored, max_len).map(std::borrow::Cow::Owned)
}

/// Decompresses a stored `raw_len:u32` + LZ4 block, refusing a raw length above `max_len`
/// (or above what LZ4 can expand the block to) before allocating.
pub fn decompress_value(stored: &[u8], max_len: u64) -> Result<Vec<u8>, FormatError> {
    let mut r = LeReader::new(stored);
    let raw_len = u64::from(r.u32()?);
    let block = r.rest();
    // An LZ4 block expands at most about 255-fold.
    if raw_len > max_len || raw_len > (block.len() as u64).saturating_mul(255) {
        return Err(FormatError::Invalid("compressed length"));
    }
    let mut out = vec![0u8; raw_len as usize];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n as u64 == raw_len => Ok(out),
        _ => Err(FormatError::Invalid("compressed value")),
    }
}

/// Layout: `crc32c:u32 key_len:u16 flags:u16 value_len:u32 key value`, `value` as stored
/// (see [`FLAG_LZ4`]). The CRC covers everything after it: the rest of the header, the key
/// and the stored value. The key hash is not stored: it is the key's.
pub fn encode_record(out: &mut Vec<u8>, key: &[u8], value: &[u8], flags: u32) {
    let start = out.len();
    LeWriter::new(out)
        .u32(0)
        .u16(key.len() as u16)
        .u16(flags as u16)
        .u32(value.len() as u32)
        .bytes(key)
        .bytes(value);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The header fields of a record, read without checking anything: for scanning a data file
/// (the lengths say where the next record starts) and listing keys.
fn peek_header(b: &[u8]) -> Result<(u32, RecordHeader), FormatError> {
    let mut r = LeReader::new(b);
    let crc = r.u32()?;
    let (key_len, flags, value_len) = (r.u16()?, r.u16()?, r.u32()?);
    let header = RecordHeader {
        key_len: u32::from(key_len),
        value_len,
        flags: u32::from(flags),
        key_hash: 0, // Computed from the key by whoever reads it.
    };
    Ok((crc, header))
}

/// The length of the record starting at `b` according to its header, unchecked.
pub fn peek_record_len(b: &[u8]) -> Result<u64, FormatError> {
    peek_header(b).map(|(_, h)| h.record_len())
}

/// The key of the record starting at `b` if its header's lengths are `key_len` and
/// `value_len` (as stored) and the key hashes to `key_hash`; the value and CRC are not read
/// (listing keys reads only record heads).
pub fn peek_key(b: &[u8], key_hash: u64, key_len: u32, value_len: u32) -> Option<&[u8]> {
    let (_, h) = peek_header(b).ok()?;
    let key = b.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + key_len as usize)?;
    (h.key_len == key_len && h.value_len == value_len && disk_hash(key) == key_hash).then_some(key)
}

/// The raw length a compressed record declares, read from its head (header, key and the
/// first four bytes of the value); `None` for a record stored uncompressed. Unchecked.
pub fn peek_raw_value_len(head: &[u8]) -> Option<u32> {
    let (_, h) = peek_header(head).ok()?;
    let at = RECORD_HEADER_LEN + h.key_len as usize;
    let b = head.get(at..at + 4)?;
    h.is_compressed()
        .then(|| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// Checks a whole record (header, key and value) and returns its header. `max_len` bounds
/// the lengths the header may claim.
pub fn decode_record(b: &[u8], max_len: u64) -> Result<RecordHeader, FormatError> {
    let (crc, mut header) = peek_header(b)?;
    if header.record_len() > max_len {
        return Err(FormatError::Invalid("record length"));
    }
    if (b.len() as u64) < header.record_len() {
        return Err(FormatError::Truncated);
    }
    let end = header.record_len() as usize;
    if crc32c::crc32c(&b[4..end]) != crc {
        return Err(FormatError::Checksum);
    }
    if !header.flags_valid() {
        return Err(FormatError::Invalid("record flags"));
    }
    header.key_hash = disk_hash(&b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + header.key_len as usize]);
    Ok(header)
}

/// The key and value of a record that [`decode_record`] accepted.
pub fn record_key_value<'a>(record: &'a [u8], header: &RecordHeader) -> (&'a [u8], &'a [u8]) {
    let key_end = RECORD_HEADER_LEN + header.key_len as usize;
    let end = key_end + header.value_len as usize;
    (&record[RECORD_HEADER_LEN..key_end], &record[key_end..end])
}

/// An index entry: where a record is, and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub header: RecordHeader,
    /// Offset of the record in its data file.
    pub offset: u32,
}

/// Layout: `key_hash:u64 offset:u32 value_len:u32 key_len:u16 flags:u16 crc32c:u32` (CRC
/// over bytes 0..20). The key hash stays here so that opening reads no data file.
pub fn encode_index_entry(entry: &IndexEntry) -> [u8; INDEX_ENTRY_LEN] {
    let mut b = Vec::with_capacity(INDEX_ENTRY_LEN);
    LeWriter::new(&mut b)
        .u64(entry.header.key_hash)
        .u32(entry.offset)
        .u32(entry.header.value_len)
        .u16(entry.header.key_len as u16)
        .u16(entry.header.flags as u16)
        .crc32c_from(0);
    b.try_into().expect("24 bytes")
}

/// Checks and decodes one index entry.
pub fn decode_index_entry(b: &[u8]) -> Result<IndexEntry, FormatError> {
    let b = b.get(..INDEX_ENTRY_LEN).ok_or(FormatError::Truncated)?;
    strip_crc32c(b)?;
    let mut r = LeReader::new(b);
    let (key_hash, offset, value_len) = (r.u64()?, r.u32()?, r.u32()?);
    let entry = IndexEntry {
        header: RecordHeader {
            key_len: u32::from(r.u16()?),
            value_len,
            flags: u32::from(r.u16()?),
            key_hash,
        },
        offset,
    };
    if !entry.header.flags_valid() || (entry.offset as usize) < SEGMENT_HEADER_LEN {
        return Err(FormatError::Invalid("index entry"));
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    // Golden bytes, computed independently (a Python CRC32C and the xxhash package), fail
    // when the format changes by accident. A deliberate change
    // bumps FORMAT_VERSION, updates docs/disk-format.md and these strings together.

    #[test]
    fn golden_meta() {
        let meta = Identity::new(b"mesa".to_vec())
            .with_version(7)
            .with_driver_versioned(true);
        let b = encode_meta(&meta);
        assert_eq!(
            hex(&b),
            "475055434d455441020000000100000007000000000000000400000000000000\
             6d65736157e6f8fd"
        );
        assert_eq!(decode_meta(&b).unwrap(), meta);
    }

    #[test]
    fn golden_segment_headers() {
        let d = encode_segment_header(SegmentFile::Data, 3);
        let i = encode_segment_header(SegmentFile::Index, 3);
        assert_eq!(
            hex(&d),
            "475055434441544102000000030000000000000000000000000000004f42b822"
        );
        assert_eq!(
            hex(&i),
            "47505543494e44580200000003000000000000000000000000000000f468b230"
        );
        assert_eq!(decode_segment_header(SegmentFile::Data, &d), Ok(3));
        assert_eq!(
            decode_segment_header(SegmentFile::Index, &d),
            Err(FormatError::BadMagic)
        );
    }

    #[test]
    fn golden_record_and_index_entry() {
        let mut rec = Vec::new();
        encode_record(&mut rec, b"key", b"value", 0);
        assert_eq!(hex(&rec), "274516c103000000050000006b657976616c7565");
        let header = decode_record(&rec, 1 << 20).unwrap();
        assert_eq!(header, RecordHeader::for_entry(b"key", 5, 0));
        let entry = IndexEntry { header, offset: 32 };
        let b = encode_index_entry(&entry);
        assert_eq!(hex(&b), "e36551a0630deabb200000000500000003000000cef20a73");
        assert_eq!(decode_index_entry(&b), Ok(entry));
    }

    #[test]
    fn golden_compressed_record() {
        // 64 times `a` as a hand-made LZ4 block (docs/disk-format.md): one literal, a match
        // at offset 1 of 4 + 15 + 39 bytes, then the five literals a block ends with.
        let mut stored = 64u32.to_le_bytes().to_vec();
        stored.extend_from_slice(&[0x1F, b'a', 1, 0, 39, 0x50]);
        stored.extend_from_slice(b"aaaaa");
        let mut rec = Vec::new();
        encode_record(&mut rec, b"k", &stored, FLAG_LZ4);
        assert_eq!(
            hex(&rec),
            "d9a7dd1b010002000f0000006b400000001f61010027506161616161"
        );
        let header = decode_record(&rec, 1 << 20).unwrap();
        assert!(header.is_compressed());
        assert_eq!(
            record_value(&rec, &header, 1 << 20).unwrap(),
            &[b'a'; 64][..]
        );
        // The declared raw length bounds the allocation: over the caller's bound, refused.
        assert_eq!(
            record_value(&rec, &header, 63),
            Err(FormatError::Invalid("compressed length"))
        );
    }

    #[test]
    fn compression_is_kept_only_when_it_saves_a_32nd() {
        assert_eq!(
            compress_value(&[7u8; 63]),
            None,
            "short values are not tried"
        );
        let zeros = vec![0u8; 4096];
        let c = compress_value(&zeros).expect("compressible");
        assert!(c.len() < 100);
        assert_eq!(decompress_value(&c, 4096).unwrap(), zeros);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(compress_value(&noise), None, "incompressible: stored as is");
    }

    #[test]
    fn hostile_compressed_values_are_refused_without_panic_or_huge_allocation() {
        // Declared raw lengths beyond any bound, lying blocks, truncations.
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![1, 2, 3],
            [u32::MAX.to_le_bytes().to_vec(), vec![0xFF; 8]].concat(),
            [
                100u32.to_le_bytes().to_vec(),
                vec![0x1F, b'a', 9, 0, 39, 0x50],
            ]
            .concat(),
            [64u32.to_le_bytes().to_vec(), vec![0xF0, 0xFF, 0xFF, 0xFF]].concat(),
        ];
        let good = compress_value(&[5u8; 1000]).unwrap();
        for n in 0..good.len() {
            cases.push(good[..n].to_vec());
        }
        for (i, c) in cases.iter().enumerate() {
            assert!(decompress_value(c, 1 << 20).is_err(), "case {i}");
        }
        // Random mutations of a sound value: an error or a value within the bound, no panic.
        let text = b"mov r0, r1; add r2, r0, #4; ".repeat(40);
        let good = compress_value(&text).unwrap();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let mut bad = good.clone();
            for _ in 0..1 + x % 4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x >> 8) as usize % bad.len();
                bad[at] = (x >> 40) as u8;
            }
            if let Ok(v) = decompress_value(&bad, 4096) {
                assert!(v.len() <= 4096);
            }
        }
        // A tombstone that claims to be compressed, and unknown flags, are refused.
        for flags in [FLAG_TOMBSTONE | FLAG_LZ4, 4, 0x8000] {
            let mut rec = Vec::new();
            encode_record(&mut rec, b"k", b"", flags);
            assert_eq!(
                decode_record(&rec, 1 << 20),
                Err(FormatError::Invalid("record flags")),
                "{flags:#x}"
            );
        }
    }

    #[test]
    fn every_single_bit_flip_and_truncation_is_detected() {
        let mut rec = Vec::new();
        encode_record(&mut rec, b"some key", &[0xAB; 100], 0);
        for bit in 0..rec.len() * 8 {
            let mut bad = rec.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&bad, 1 << 20).is_err(), "bit {bit}");
        }
        for len in 0..rec.len() {
            assert!(decode_record(&rec[..len], 1 << 20).is_err(), "len {len}");
        }
        let entry = encode_index_entry(&IndexEntry {
            header: RecordHeader::for_entry(b"k", 1, 0),
            offset: 64,
        });
        for bit in 0..INDEX_ENTRY_LEN * 8 {
            let mut bad = entry;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_index_entry(&bad).is_err(), "bit {bit}");
        }
        let meta = encode_meta(&Identity::new(b"id".to_vec()).with_version(1));
        for bit in 0..meta.len() * 8 {
            let mut bad = meta.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_meta(&bad).is_err(), "bit {bit}");
        }
        for len in 0..meta.len() {
            assert!(decode_meta(&meta[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn unknown_meta_flags_are_refused() {
        let mut b = encode_meta(&Identity::new(b"x".to_vec()));
        b[12] = 0b11; // Driver-versioned and a flag no build knows yet.
        b.truncate(b.len() - 4);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_meta(&b), Err(FormatError::Invalid("meta flags")));
    }

    #[test]
    fn hostile_lengths_are_refused_before_reading() {
        let mut rec = Vec::new();
        encode_record(&mut rec, b"k", b"v", 0);
        rec[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_record(&rec, 1 << 20),
            Err(FormatError::Invalid("record length"))
        );
        let mut meta = encode_meta(&Identity::default());
        meta[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_meta(&meta),
            Err(FormatError::Invalid("identity length"))
        );
    }
}
