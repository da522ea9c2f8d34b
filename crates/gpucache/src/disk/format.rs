//! The on-disk format, version 1: encoding and checked decoding of every structure.
//!
//! All integers are little-endian; every structure carries a CRC32C. `docs/disk-format.md`
//! is the human description; the golden-byte tests below fail when the bytes change.
//! Decoders never trust a length before checking it against a bound, so hostile files cost
//! no more than their own size.

use std::fmt;

/// Bumped on any incompatible change; a directory of another version is wiped.
pub const FORMAT_VERSION: u32 = 1;

pub const META_MAGIC: [u8; 8] = *b"GPUCMETA";
pub const DATA_MAGIC: [u8; 8] = *b"GPUCDATA";
pub const INDEX_MAGIC: [u8; 8] = *b"GPUCINDX";

/// Size of a segment file header (data and index files alike).
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of a record header in a data file.
pub const RECORD_HEADER_LEN: usize = 24;
/// Size of an index entry.
pub const INDEX_ENTRY_LEN: usize = 32;
/// Longest key persisted; longer keys stay in memory only.
pub const MAX_KEY_LEN: usize = u16::MAX as usize;
/// Longest identity accepted in a meta file.
pub const MAX_IDENTITY_LEN: usize = 64 << 10;

/// Record flag: the key was removed.
pub const FLAG_TOMBSTONE: u32 = 1;
/// Meta flag: the cache is versioned by driver identity (kept side by side per identity).
pub const META_FLAG_DRIVER_VERSIONED: u32 = 1;

/// Why bytes failed to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// Fewer bytes than the structure needs.
    Truncated,
    /// Not a gpucache file of this kind.
    BadMagic,
    /// Written by another format version.
    Version(u32),
    /// The checksum does not match the bytes.
    Checksum,
    /// A length or field is out of its allowed range.
    Invalid(&'static str),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Truncated => f.write_str("truncated"),
            FormatError::BadMagic => f.write_str("bad magic"),
            FormatError::Version(v) => write!(f, "format version {v}, expected {FORMAT_VERSION}"),
            FormatError::Checksum => f.write_str("checksum mismatch"),
            FormatError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for FormatError {}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The key hash stored on disk: XXH3-64 with seed 0, the same in every process and version.
pub fn disk_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

// ---------------------------------------------------------------------------------------
// Meta file: identifies the cache that owns a directory.

/// The identity a directory was created for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// `META_FLAG_*` bits.
    pub flags: u32,
    /// The application's (or session's) cache version.
    pub cache_version: u64,
    /// Opaque identity bytes (driver vendor, renderer, version, ...).
    pub identity: Vec<u8>,
}

/// Layout: `magic[8] format_version:u32 flags:u32 cache_version:u64 identity_len:u32
/// reserved:u32 identity[identity_len] crc32c:u32` (the CRC covers everything before it).
pub fn encode_meta(meta: &Meta) -> Vec<u8> {
    let mut b = Vec::with_capacity(36 + meta.identity.len());
    b.extend_from_slice(&META_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&meta.flags.to_le_bytes());
    b.extend_from_slice(&meta.cache_version.to_le_bytes());
    b.extend_from_slice(&(meta.identity.len() as u32).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&meta.identity);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Checks and decodes a meta file.
pub fn decode_meta(b: &[u8]) -> Result<Meta, FormatError> {
    if b.len() < 36 {
        return Err(FormatError::Truncated);
    }
    if b[..8] != META_MAGIC {
        return Err(FormatError::BadMagic);
    }
    let identity_len = u32_at(b, 24) as usize;
    if identity_len > MAX_IDENTITY_LEN {
        return Err(FormatError::Invalid("identity length"));
    }
    let end = 32 + identity_len;
    if b.len() != end + 4 {
        return Err(FormatError::Truncated);
    }
    if crc32c::crc32c(&b[..end]) != u32_at(b, end) {
        return Err(FormatError::Checksum);
    }
    let version = u32_at(b, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    Ok(Meta {
        flags: u32_at(b, 12),
        cache_version: u64_at(b, 16),
        identity: b[32..end].to_vec(),
    })
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
    let mut b = [0u8; SEGMENT_HEADER_LEN];
    b[..8].copy_from_slice(&kind.magic());
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&segment_id.to_le_bytes());
    let crc = crc32c::crc32c(&b[..28]);
    b[28..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Checks a segment header; returns its segment id.
pub fn decode_segment_header(kind: SegmentFile, b: &[u8]) -> Result<u32, FormatError> {
    if b.len() < SEGMENT_HEADER_LEN {
        return Err(FormatError::Truncated);
    }
    if b[..8] != kind.magic() {
        return Err(FormatError::BadMagic);
    }
    if crc32c::crc32c(&b[..28]) != u32_at(b, 28) {
        return Err(FormatError::Checksum);
    }
    let version = u32_at(b, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    Ok(u32_at(b, 12))
}

// ---------------------------------------------------------------------------------------
// Records (data files) and index entries.

/// What a record or index entry says about one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub key_hash: u64,
    pub key_len: u32,
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
}

/// Layout: `crc32c:u32 key_len:u32 value_len:u32 flags:u32 key_hash:u64 key value`. The
/// CRC covers everything after it: the rest of the header, the key and the value.
pub fn encode_record(out: &mut Vec<u8>, key: &[u8], value: &[u8], flags: u32) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&disk_hash(key).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Checks a whole record (header, key and value) and returns its header. `max_len` bounds
/// the lengths the header may claim.
pub fn decode_record(b: &[u8], max_len: u64) -> Result<RecordHeader, FormatError> {
    if b.len() < RECORD_HEADER_LEN {
        return Err(FormatError::Truncated);
    }
    let header = RecordHeader {
        key_len: u32_at(b, 4),
        value_len: u32_at(b, 8),
        flags: u32_at(b, 12),
        key_hash: u64_at(b, 16),
    };
    if header.key_len as usize > MAX_KEY_LEN || header.record_len() > max_len {
        return Err(FormatError::Invalid("record length"));
    }
    if (b.len() as u64) < header.record_len() {
        return Err(FormatError::Truncated);
    }
    let end = header.record_len() as usize;
    if crc32c::crc32c(&b[4..end]) != u32_at(b, 0) {
        return Err(FormatError::Checksum);
    }
    let key = &b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + header.key_len as usize];
    if disk_hash(key) != header.key_hash {
        return Err(FormatError::Invalid("key hash"));
    }
    Ok(header)
}

/// An index entry: where a record is, and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub header: RecordHeader,
    /// Offset of the record in its data file.
    pub offset: u32,
}

/// Layout: `key_hash:u64 offset:u32 key_len:u32 value_len:u32 flags:u32 reserved:u32
/// crc32c:u32` (CRC over bytes 0..28).
pub fn encode_index_entry(entry: &IndexEntry) -> [u8; INDEX_ENTRY_LEN] {
    let mut b = [0u8; INDEX_ENTRY_LEN];
    b[..8].copy_from_slice(&entry.header.key_hash.to_le_bytes());
    b[8..12].copy_from_slice(&entry.offset.to_le_bytes());
    b[12..16].copy_from_slice(&entry.header.key_len.to_le_bytes());
    b[16..20].copy_from_slice(&entry.header.value_len.to_le_bytes());
    b[20..24].copy_from_slice(&entry.header.flags.to_le_bytes());
    let crc = crc32c::crc32c(&b[..28]);
    b[28..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Checks and decodes one index entry.
pub fn decode_index_entry(b: &[u8]) -> Result<IndexEntry, FormatError> {
    if b.len() < INDEX_ENTRY_LEN {
        return Err(FormatError::Truncated);
    }
    if crc32c::crc32c(&b[..28]) != u32_at(b, 28) {
        return Err(FormatError::Checksum);
    }
    let entry = IndexEntry {
        header: RecordHeader {
            key_hash: u64_at(b, 0),
            key_len: u32_at(b, 12),
            value_len: u32_at(b, 16),
            flags: u32_at(b, 20),
        },
        offset: u32_at(b, 8),
    };
    if entry.header.key_len as usize > MAX_KEY_LEN
        || (entry.offset as usize) < SEGMENT_HEADER_LEN
        || u32_at(b, 24) != 0
    {
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
        let meta = Meta {
            flags: META_FLAG_DRIVER_VERSIONED,
            cache_version: 7,
            identity: b"mesa".to_vec(),
        };
        let b = encode_meta(&meta);
        assert_eq!(
            hex(&b),
            "475055434d455441010000000100000007000000000000000400000000000000\
             6d657361fa0d2a1e"
        );
        assert_eq!(decode_meta(&b).unwrap(), meta);
    }

    #[test]
    fn golden_segment_headers() {
        let d = encode_segment_header(SegmentFile::Data, 3);
        let i = encode_segment_header(SegmentFile::Index, 3);
        assert_eq!(
            hex(&d),
            "47505543444154410100000003000000000000000000000000000000885a7c7b"
        );
        assert_eq!(
            hex(&i),
            "47505543494e4458010000000300000000000000000000000000000033707669"
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
        assert_eq!(
            hex(&rec),
            "617b4075030000000500000000000000e36551a0630deabb6b657976616c7565"
        );
        let header = decode_record(&rec, 1 << 20).unwrap();
        assert_eq!(header, RecordHeader::for_entry(b"key", 5, 0));
        let entry = IndexEntry { header, offset: 32 };
        let b = encode_index_entry(&entry);
        assert_eq!(
            hex(&b),
            "e36551a0630deabb200000000300000005000000000000000000000064351e7d"
        );
        assert_eq!(decode_index_entry(&b), Ok(entry));
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
        let meta = encode_meta(&Meta {
            flags: 0,
            cache_version: 1,
            identity: b"id".to_vec(),
        });
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
    fn hostile_lengths_are_refused_before_reading() {
        let mut rec = Vec::new();
        encode_record(&mut rec, b"k", b"v", 0);
        rec[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_record(&rec, 1 << 20),
            Err(FormatError::Invalid("record length"))
        );
        let mut meta = encode_meta(&Meta {
            flags: 0,
            cache_version: 0,
            identity: Vec::new(),
        });
        meta[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_meta(&meta),
            Err(FormatError::Invalid("identity length"))
        );
    }
}
