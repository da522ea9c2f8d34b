//! The persisted hash table, `seg-table.hix`: key hash → location of the key's latest value
//! record, for the entries the index files held when a writer last wrote it, in checksummed
//! 4 KiB pages. A process opening the directory reads its header and serves hits through it
//! with one page read per lookup, before it has read the index files (`super::lazy`).
//!
//! The table is a summary, never the truth: a writer rewrites it whole (temporary file renamed
//! over it) under the directory lock; a reader checks every record it names as it checks
//! any record, and trusts a table only together with the index-file tails written after it
//! (`docs/disk-format.md`).

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

use super::dir::At;
use super::format::{decode_meta, FORMAT_VERSION};
use super::index::Loc;
use super::read::read_up_to;
use crate::codec::{strip_crc32c, FormatError, LeReader, LeWriter};
use crate::identity::MAX_IDENTITY_LEN;
use crate::Identity;

/// The table's file name: `seg-` so that every wipe (of any version) removes it with the
/// segments; not a segment or stream name.
pub(crate) const TABLE_FILE: &str = "seg-table.hix";
const MAGIC: [u8; 8] = *b"GPUCHTBL";
/// Version of the table's own layout and of what a reader may assume of it. 2 added the
/// meta file's bytes; 3 (same layout) is written only by writers that keep the rules that
/// let an open skip the listing and the `stat` of `meta` (`docs/disk-format.md`, "Trust").
/// A table of another version is ignored, and rewritten by the next writer: it is derived.
pub const TABLE_VERSION: u32 = 3;
/// Bytes per page, and the unit of the header's length.
pub const PAGE_LEN: usize = 4096;
const PAGE_HEADER_LEN: usize = 8;
const SLOT_LEN: usize = 24;
/// Slots in one page: 170.
pub const SLOTS_PER_PAGE: usize = (PAGE_LEN - PAGE_HEADER_LEN) / SLOT_LEN;
/// Entries per page a writer aims at (two thirds full: a page overflows with negligible odds).
const TARGET_FILL: usize = 112;
const FIXED_HEADER_LEN: usize = 48;
const SEG_LEN: usize = 40;
/// At most this many segments (a header of 40 MiB), a bound a reader checks before allocating.
const MAX_SEGMENTS: usize = 1 << 20;
/// The longest meta file: its 32-byte header, the longest identity and the CRC.
const MAX_META_LEN: usize = 32 + MAX_IDENTITY_LEN + 4;
/// Page flag: more entries hashed to this page than it holds; a key absent from it is unknown.
const PAGE_OVERFLOWED: u16 = 1;

/// One segment as the table saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSeg {
    pub id: u32,
    /// Bytes of the index file the table covers (its watermark).
    pub idx_len: u64,
    /// End of the last record those entries describe.
    pub data_end: u64,
    /// Inode and birth time (ns since the epoch, 0 if unknown) of that index file.
    pub idx_ino: u64,
    pub idx_btime: u64,
    /// CRC32C of the last index entry the table covers (the 24 bytes before `idx_len`; 0 if
    /// none): an index file cut by a power cut and appended to again is told apart.
    pub last_entry_crc: u32,
}

/// The table's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableHeader {
    /// Header length, a multiple of [`PAGE_LEN`]; pages follow it.
    pub header_len: u32,
    pub pages: u32,
    pub entries: u64,
    /// Inode of the directory's `meta` file when the table was written (recorded, not
    /// checked since version 3: a wipe removes the table before it replaces `meta`).
    pub meta_ino: u64,
    /// Ascending ids.
    pub segs: Vec<TableSeg>,
    /// The bytes of that meta file, as the writer (holding the lock, having checked it) saw
    /// them. Every wipe removes the table before it writes another `meta`, so while the
    /// table exists these are the bytes of `meta` (or of the `meta` its entries were written
    /// under): an open checks its identity here instead of reading it.
    pub meta: Vec<u8>,
}

impl TableHeader {
    /// Whether the entries this table covers were written for `identity` (the meta bytes
    /// it holds name it).
    pub(crate) fn vouches_for(&self, identity: &Identity) -> bool {
        decode_meta(&self.meta).is_ok_and(|m| m == *identity)
    }
}

/// One slot: where a key's latest value record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub hash: u64,
    pub seg: u32,
    pub offset: u32,
    pub value_len: u32,
    pub key_len: u16,
}

impl Slot {
    pub(crate) fn loc(&self) -> Loc {
        Loc {
            seg: self.seg,
            offset: self.offset,
            value_len: self.value_len,
            key_len: self.key_len,
            tombstone: false,
        }
    }
}

/// What a page says of a key hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    At(Slot),
    /// Not in the table: no value when the table was written.
    Absent,
    /// The page cannot tell (overflowed, damaged, unreadable).
    Unknown,
}

/// The page of `hash` among `pages`.
pub fn page_of(hash: u64, pages: u32) -> u32 {
    (((hash >> 32) * u64::from(pages)) >> 32) as u32
}

/// The header length a header's first 48 bytes declare (checked against what it must hold).
pub fn declared_header_len(b: &[u8]) -> Result<usize, FormatError> {
    let mut r = LeReader::new(b);
    if r.array::<8>()? != MAGIC {
        return Err(FormatError::BadMagic);
    }
    let (table_version, format_version) = (r.u32()?, r.u32()?);
    if table_version != TABLE_VERSION {
        return Err(FormatError::Version(table_version));
    }
    if format_version != FORMAT_VERSION {
        return Err(FormatError::Version(format_version));
    }
    let header_len = r.u32()? as usize;
    r.skip(20)?;
    let (segs, meta) = (r.u32()? as usize, r.u32()? as usize);
    if segs > MAX_SEGMENTS {
        return Err(FormatError::Invalid("table segments"));
    }
    if meta > MAX_META_LEN {
        return Err(FormatError::Invalid("table meta length"));
    }
    if !header_len.is_multiple_of(PAGE_LEN) || header_len < covered_len(segs, meta) + 4 {
        return Err(FormatError::Invalid("table header length"));
    }
    Ok(header_len)
}

/// Bytes of a header before its CRC, for `segs` segments and a meta file of `meta` bytes.
pub fn covered_len(segs: usize, meta: usize) -> usize {
    FIXED_HEADER_LEN + segs * SEG_LEN + meta
}

/// Layout: `magic[8] table_version:u32 format_version:u32 header_len:u32 pages:u32
/// entries:u64 meta_ino:u64 segments:u32 meta_len:u32`, then per segment `id:u32
/// last_entry_crc:u32 idx_len:u64 data_end:u64 idx_ino:u64 idx_btime:u64`, then the meta
/// file's `meta_len` bytes, then the CRC32C of all that, then zeros up to `header_len`.
pub fn encode_header(h: &TableHeader) -> Vec<u8> {
    let mut b = Vec::with_capacity(h.header_len as usize);
    let mut w = LeWriter::new(&mut b);
    w.bytes(&MAGIC)
        .u32(TABLE_VERSION)
        .u32(FORMAT_VERSION)
        .u32(h.header_len)
        .u32(h.pages)
        .u64(h.entries)
        .u64(h.meta_ino)
        .u32(h.segs.len() as u32)
        .u32(h.meta.len() as u32);
    for s in &h.segs {
        w.u32(s.id)
            .u32(s.last_entry_crc)
            .u64(s.idx_len)
            .u64(s.data_end)
            .u64(s.idx_ino)
            .u64(s.idx_btime);
    }
    w.bytes(&h.meta).crc32c_from(0);
    b.resize(h.header_len as usize, 0);
    b
}

/// Checks and decodes a header (`b`: at least its declared length).
pub fn decode_header(b: &[u8]) -> Result<TableHeader, FormatError> {
    let header_len = declared_header_len(b)?;
    if b.len() < header_len {
        return Err(FormatError::Truncated);
    }
    let mut r = LeReader::new(b);
    r.skip(20)?;
    let (pages, entries, meta_ino) = (r.u32()?, r.u64()?, r.u64()?);
    let (n, meta_len) = (r.u32()? as usize, r.u32()? as usize);
    strip_crc32c(&b[..covered_len(n, meta_len) + 4])?;
    if pages == 0 {
        return Err(FormatError::Invalid("table pages"));
    }
    let mut segs: Vec<TableSeg> = Vec::with_capacity(n);
    for _ in 0..n {
        let (id, last_entry_crc) = (r.u32()?, r.u32()?);
        let seg = TableSeg {
            id,
            last_entry_crc,
            idx_len: r.u64()?,
            data_end: r.u64()?,
            idx_ino: r.u64()?,
            idx_btime: r.u64()?,
        };
        if segs.last().is_some_and(|last| last.id >= id) {
            return Err(FormatError::Invalid("table segment order"));
        }
        segs.push(seg);
    }
    Ok(TableHeader {
        header_len: header_len as u32,
        pages,
        entries,
        meta_ino,
        segs,
        meta: r.bytes(meta_len)?.to_vec(),
    })
}

/// Layout of a page: `crc32c:u32` (of bytes 4..4096) `count:u16 flags:u16`, then `count`
/// slots `key_hash:u64 segment:u32 offset:u32 value_len:u32 key_len:u16 reserved:u16`, then
/// zeros.
#[cfg(any(test, fuzzing))]
pub fn decode_page(b: &[u8]) -> Result<(Vec<Slot>, bool), FormatError> {
    let (count, overflowed) = check_page(b)?;
    let slots = page_slots(b, count).map(decode_slot).collect();
    Ok((slots, overflowed))
}

/// The slot of `hash` in page `b`, and whether the page overflowed; decodes only that slot
/// (a lookup allocates nothing).
pub fn find_in_page(b: &[u8], hash: u64) -> Result<(Option<Slot>, bool), FormatError> {
    let (count, overflowed) = check_page(b)?;
    let want = hash.to_le_bytes();
    let slot = page_slots(b, count)
        .find(|s| s[..8] == want)
        .map(decode_slot);
    Ok((slot, overflowed))
}

/// Checks a page's length, CRC, slot count and flags: `(slot count, overflowed)`.
fn check_page(b: &[u8]) -> Result<(usize, bool), FormatError> {
    if b.len() != PAGE_LEN {
        return Err(FormatError::Truncated);
    }
    let mut r = LeReader::new(b);
    if r.u32()? != crc32c::crc32c(&b[4..]) {
        return Err(FormatError::Checksum);
    }
    let (count, flags) = (r.u16()? as usize, r.u16()?);
    if count > SLOTS_PER_PAGE || flags & !PAGE_OVERFLOWED != 0 {
        return Err(FormatError::Invalid("table page"));
    }
    Ok((count, flags & PAGE_OVERFLOWED != 0))
}

/// The first `count` slots of a checked page, each [`SLOT_LEN`] bytes.
fn page_slots(b: &[u8], count: usize) -> impl Iterator<Item = &[u8]> {
    b[PAGE_HEADER_LEN..].chunks_exact(SLOT_LEN).take(count)
}

/// One slot's bytes (`SLOT_LEN` of them, from a checked page).
fn decode_slot(b: &[u8]) -> Slot {
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Slot {
        hash: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        seg: u32_at(8),
        offset: u32_at(12),
        value_len: u32_at(16),
        key_len: u16::from_le_bytes([b[20], b[21]]),
    }
}

/// Encodes a whole table: header, then the pages the live entries hash to.
/// `meta_ino` and `meta`: the directory's meta file's inode and bytes.
pub fn encode_table(
    meta_ino: u64,
    meta: Vec<u8>,
    segs: Vec<TableSeg>,
    live: &[(u64, Loc)],
) -> Result<Vec<u8>, FormatError> {
    if segs.len() > MAX_SEGMENTS {
        return Err(FormatError::Invalid("table segments"));
    }
    if meta.len() > MAX_META_LEN {
        return Err(FormatError::Invalid("table meta length"));
    }
    let pages = live.len().div_ceil(TARGET_FILL).max(1);
    let pages = u32::try_from(pages).map_err(|_| FormatError::Invalid("table pages"))?;
    let header_len = (covered_len(segs.len(), meta.len()) + 4).next_multiple_of(PAGE_LEN);
    let header = TableHeader {
        header_len: header_len as u32,
        pages,
        entries: live.len() as u64,
        meta_ino,
        segs,
        meta,
    };
    let mut out = encode_header(&header);
    out.resize(header_len + pages as usize * PAGE_LEN, 0);
    let body = &mut out[header_len..];
    for &(hash, loc) in live {
        let page = &mut body[page_of(hash, pages) as usize * PAGE_LEN..][..PAGE_LEN];
        let count = u16::from_le_bytes([page[4], page[5]]) as usize;
        if count == SLOTS_PER_PAGE {
            page[6] |= PAGE_OVERFLOWED as u8;
            continue;
        }
        let mut slot = Vec::with_capacity(SLOT_LEN);
        LeWriter::new(&mut slot)
            .u64(hash)
            .u32(loc.seg)
            .u32(loc.offset)
            .u32(loc.value_len)
            .u16(loc.key_len)
            .u16(0);
        let at = PAGE_HEADER_LEN + count * SLOT_LEN;
        page[at..at + SLOT_LEN].copy_from_slice(&slot);
        page[4..6].copy_from_slice(&(count as u16 + 1).to_le_bytes());
    }
    for page in body.chunks_exact_mut(PAGE_LEN) {
        let crc = crc32c::crc32c(&page[4..]);
        page[..4].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

pub(crate) fn table_path(dir: &Path) -> PathBuf {
    dir.join(TABLE_FILE)
}

/// An open table file: its header, and page reads on demand.
#[derive(Debug)]
pub(crate) struct Table {
    file: File,
    pub header: TableHeader,
}

impl Table {
    /// Opens and checks the table of `dir`: `None` if there is none or it does not decode.
    #[cfg(test)]
    pub(crate) fn open(dir: &Path) -> io::Result<Option<Table>> {
        Table::open_at(At::path(dir))
    }

    /// [`Table::open`] of the directory `at` names.
    pub(crate) fn open_at(at: At<'_>) -> io::Result<Option<Table>> {
        let file = match at.open(TABLE_FILE) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // No `fadvise(RANDOM)` (one call on every open): Linux reads ahead only around this
        // first read (16 KiB instead of 4 KiB, in the same device read on the hard-disk
        // profile); the pages read later, at random, are read as they are.
        // The first page on the stack (as in `find`); a longer header is read again whole.
        let mut first = [0u8; PAGE_LEN];
        let got = read_up_to(&file, &mut first, 0)?;
        let Ok(len) = declared_header_len(&first[..got]) else {
            return Ok(None);
        };
        let header = if len <= got {
            decode_header(&first[..got])
        } else {
            let mut whole = vec![0u8; len];
            if read_up_to(&file, &mut whole, 0)? < len {
                return Ok(None);
            }
            decode_header(&whole)
        };
        Ok(header.ok().map(|header| Table { file, header }))
    }

    /// Looks `hash` up in its page (one read).
    pub(crate) fn find(&self, hash: u64) -> Found {
        let page = page_of(hash, self.header.pages);
        let at = u64::from(self.header.header_len) + u64::from(page) * PAGE_LEN as u64;
        // On the stack: on a first hit a heap block this size can cost more than the read
        // (glibc may consolidate its free lists before serving one).
        let mut buf = [0u8; PAGE_LEN];
        if !matches!(read_up_to(&self.file, &mut buf, at), Ok(PAGE_LEN)) {
            return Found::Unknown;
        }
        match find_in_page(&buf, hash) {
            Ok((Some(slot), _)) => Found::At(slot),
            Ok((None, true)) | Err(_) => Found::Unknown,
            Ok((None, false)) => Found::Absent,
        }
    }
}

/// Writes `bytes` as `dir`'s table: to `seg-table.hix.tmp.<pid>`, put in place of the table.
/// Not fsynced: a table lost or torn by a power cut fails its checks and is ignored. Called
/// under the directory lock.
pub(crate) fn write_table(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    super::dir::write_unsynced(&table_path(dir), bytes)
}

/// Removes `dir`'s table, if any (before segments are removed wholesale).
pub(crate) fn remove_table(dir: &Path) -> io::Result<()> {
    match fs::remove_file(table_path(dir)) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(seg: u32, offset: u32) -> Loc {
        Loc {
            seg,
            offset,
            value_len: 100,
            key_len: 8,
            tombstone: false,
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The header and first page of a one-entry table, byte for byte (format change guard;
    /// the expected bytes, CRCs included, were computed by an independent Python script).
    #[test]
    fn golden_bytes() {
        let seg = TableSeg {
            id: 1,
            idx_len: 56,
            data_end: 152,
            idx_ino: 7,
            idx_btime: 9,
            last_entry_crc: 0x0a0b_0c0d,
        };
        let live = [(0x0102_0304_0506_0708, loc(1, 32))];
        let bytes = encode_table(3, b"META".to_vec(), vec![seg], &live).unwrap();
        assert_eq!(bytes.len(), 2 * PAGE_LEN);
        assert_eq!(
            hex(&bytes[..96]),
            concat!(
                "475055434854424c",
                "03000000",
                "02000000",
                "00100000",
                "01000000",
                "0100000000000000",
                "0300000000000000",
                "01000000",
                "04000000",
                "01000000",
                "0d0c0b0a",
                "3800000000000000",
                "9800000000000000",
                "0700000000000000",
                "0900000000000000",
                "4d455441",
                "d5394c68"
            )
        );
        assert!(bytes[96..PAGE_LEN].iter().all(|&b| b == 0));
        let page = &bytes[PAGE_LEN..];
        assert_eq!(
            hex(&page[..32]),
            concat!(
                "6dc05551",
                "0100",
                "0000",
                "0807060504030201",
                "01000000",
                "20000000",
                "64000000",
                "0800",
                "0000"
            )
        );
        assert!(page[32..].iter().all(|&b| b == 0));
    }

    #[test]
    fn round_trip_and_lookups() {
        let live: Vec<(u64, Loc)> = (0..5000u64)
            .map(|i| {
                (
                    xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()),
                    loc(1, i as u32),
                )
            })
            .collect();
        let segs = vec![TableSeg {
            id: 1,
            idx_len: 32,
            data_end: 32,
            idx_ino: 1,
            idx_btime: 0,
            last_entry_crc: 0,
        }];
        let meta = crate::disk::format::encode_meta(&Identity::new(b"gpu".to_vec()));
        let bytes = encode_table(5, meta.clone(), segs.clone(), &live).unwrap();
        let header = decode_header(&bytes).unwrap();
        assert_eq!(header.segs, segs);
        assert_eq!(header.meta, meta);
        assert!(header.vouches_for(&Identity::new(b"gpu".to_vec())));
        assert!(!header.vouches_for(&Identity::new(b"gpu2".to_vec())));
        assert_eq!(header.entries, 5000);
        let dir = tempfile::tempdir().unwrap();
        write_table(dir.path(), &bytes).unwrap();
        let table = Table::open(dir.path()).unwrap().unwrap();
        for &(hash, l) in &live {
            assert_eq!(
                table.find(hash),
                Found::At(Slot {
                    hash,
                    seg: l.seg,
                    offset: l.offset,
                    value_len: l.value_len,
                    key_len: l.key_len
                })
            );
        }
        assert_eq!(table.find(12345), Found::Absent);
        // A lookup in a page agrees with the whole page decoded, slot by slot.
        let pages = &bytes[header.header_len as usize..];
        for page in pages.chunks_exact(PAGE_LEN).take(8) {
            let (slots, overflowed) = decode_page(page).unwrap();
            for slot in &slots {
                assert_eq!(find_in_page(page, slot.hash), Ok((Some(*slot), overflowed)));
            }
            assert_eq!(find_in_page(page, 12345), Ok((None, overflowed)));
        }
        // A damaged page is unknown, never a wrong slot or a false absence.
        let mut bad = bytes.clone();
        let page = page_of(live[0].0, header.pages) as usize;
        bad[header.header_len as usize + page * PAGE_LEN + 20] ^= 1;
        write_table(dir.path(), &bad).unwrap();
        let table = Table::open(dir.path()).unwrap().unwrap();
        assert_eq!(table.find(live[0].0), Found::Unknown);
        // A damaged or cut header is no table.
        for cut in [0, 10, 60, PAGE_LEN - 1] {
            write_table(dir.path(), &bytes[..cut]).unwrap();
            assert!(Table::open(dir.path()).unwrap().is_none(), "cut at {cut}");
        }
        let mut bad = bytes;
        bad[30] ^= 1;
        write_table(dir.path(), &bad).unwrap();
        assert!(Table::open(dir.path()).unwrap().is_none());
    }

    #[test]
    fn a_full_page_is_marked_and_answers_unknown() {
        // Every entry in one page.
        let live: Vec<(u64, Loc)> = (0..200u64).map(|i| (i, loc(1, i as u32))).collect();
        let bytes = encode_table(0, Vec::new(), vec![], &live).unwrap();
        let header = decode_header(&bytes).unwrap();
        assert_eq!(header.pages, 2);
        let (slots, overflowed) = decode_page(&bytes[PAGE_LEN..2 * PAGE_LEN]).unwrap();
        assert_eq!(slots.len(), SLOTS_PER_PAGE);
        assert!(overflowed);
    }
}
