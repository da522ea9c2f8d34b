//! Bundles: a single-file copy of a cache's live entries (`docs/bundle-format.md`).

use std::io::{ErrorKind, Read, Write};
use std::path::Path;

use super::{invalid, Snapshot};
use crate::disk::format::{MAX_IDENTITY_LEN, MAX_KEY_LEN, META_FLAG_DRIVER_VERSIONED};
use crate::{Error, Result};

/// First bytes of a bundle file.
pub const BUNDLE_MAGIC: [u8; 8] = *b"GPUCBNDL";
/// The bundle format version this build writes and reads.
pub const BUNDLE_VERSION: u32 = 1;
const TAG_RECORD: u32 = 1;
const TAG_END: u32 = 2;
const BUNDLE_HEADER_LEN: u64 = 32;
const ITEM_HEADER_LEN: u64 = 16;

/// Whom a bundle's entries belong to: the meta of the directory it was exported from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleHeader {
    /// Meta flags of the source directory (bit 0: driver-versioned).
    pub flags: u32,
    /// Cache version of the source directory.
    pub cache_version: u64,
    /// Identity of the source directory.
    pub identity: Vec<u8>,
}

impl BundleHeader {
    /// Whether the entries come from a driver-versioned cache.
    pub fn driver_versioned(&self) -> bool {
        self.flags & META_FLAG_DRIVER_VERSIONED != 0
    }

    pub(super) fn matches(&self, meta: &super::CacheMeta) -> bool {
        (self.flags, self.cache_version, &self.identity)
            == (meta.flags, meta.cache_version, &meta.identity)
    }
}

/// One key/value pair of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleEntry {
    /// The key (at most 65,535 bytes).
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// A whole bundle, as [`parse_bundle`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// Identity and version of the entries.
    pub header: BundleHeader,
    /// The entries, in file order (a later entry for the same key wins on import).
    pub entries: Vec<BundleEntry>,
}

/// Writes a bundle: the header now, an entry per [`push`](Self::push), the end marker on
/// [`finish`](Self::finish). A bundle without its end marker is refused by the reader.
#[derive(Debug)]
pub struct BundleWriter<W: Write> {
    out: W,
    count: u64,
}

impl<W: Write> BundleWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W, header: &BundleHeader) -> Result<Self> {
        if header.identity.len() > MAX_IDENTITY_LEN {
            return Err(invalid("bundle identity longer than 64 KiB"));
        }
        let mut b = Vec::with_capacity(BUNDLE_HEADER_LEN as usize + header.identity.len() + 4);
        b.extend_from_slice(&BUNDLE_MAGIC);
        b.extend_from_slice(&BUNDLE_VERSION.to_le_bytes());
        b.extend_from_slice(&header.flags.to_le_bytes());
        b.extend_from_slice(&header.cache_version.to_le_bytes());
        b.extend_from_slice(&(header.identity.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&header.identity);
        b.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
        out.write_all(&b)?;
        Ok(BundleWriter { out, count: 0 })
    }

    /// Appends one entry.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let value_len = u32::try_from(value.len()).map_err(|_| invalid("value over 4 GiB"))?;
        if key.len() > MAX_KEY_LEN {
            return Err(invalid("key longer than 65,535 bytes"));
        }
        let mut head = [0u8; ITEM_HEADER_LEN as usize];
        head[..4].copy_from_slice(&TAG_RECORD.to_le_bytes());
        head[4..8].copy_from_slice(&(key.len() as u32).to_le_bytes());
        head[8..12].copy_from_slice(&value_len.to_le_bytes());
        let crc = record_crc(&head[..12], key, value);
        head[12..].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&head)?;
        self.out.write_all(key)?;
        self.out.write_all(value)?;
        self.count += 1;
        Ok(())
    }

    /// Writes the end marker (with the entry count) and returns the writer.
    pub fn finish(mut self) -> Result<W> {
        let mut end = [0u8; 20];
        end[..4].copy_from_slice(&TAG_END.to_le_bytes());
        end[8..16].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&end[..16]);
        end[16..].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn record_crc(head: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let crc = crc32c::crc32c(head);
    crc32c::crc32c_append(crc32c::crc32c_append(crc, key), value)
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads a bundle entry by entry, checking as it goes: a damaged, truncated or extended
/// bundle is an error, never an altered entry. Memory use is bounded by the largest entry,
/// and no length is trusted before it is checked against the bytes that remain.
#[derive(Debug)]
pub struct BundleReader<R: Read> {
    input: R,
    remaining: u64,
    pos: u64,
    header: BundleHeader,
    count: u64,
    done: bool,
}

impl<R: Read> BundleReader<R> {
    /// Reads and checks the header; `len` is the bundle's size in bytes (the file's length).
    pub fn new(input: R, len: u64) -> Result<Self> {
        let mut r = BundleReader {
            input,
            remaining: len,
            pos: 0,
            header: BundleHeader {
                flags: 0,
                cache_version: 0,
                identity: Vec::new(),
            },
            count: 0,
            done: false,
        };
        let fixed = r.take(BUNDLE_HEADER_LEN)?;
        if fixed[..8] != BUNDLE_MAGIC {
            return Err(invalid("not a gpucache bundle (bad magic)"));
        }
        let version = le32(&fixed, 8);
        if version != BUNDLE_VERSION {
            return Err(invalid(format!(
                "bundle format version {version}; this build reads version {BUNDLE_VERSION}"
            )));
        }
        let identity_len = u64::from(le32(&fixed, 24));
        if identity_len > MAX_IDENTITY_LEN as u64 {
            return Err(invalid("bundle: identity longer than 64 KiB"));
        }
        let identity = r.take(identity_len)?;
        let crc = le32(&r.take(4)?, 0);
        let crc_want = crc32c::crc32c_append(crc32c::crc32c(&fixed), &identity);
        if crc != crc_want {
            return Err(invalid("bundle: header checksum mismatch"));
        }
        let flags = le32(&fixed, 12);
        if flags & !META_FLAG_DRIVER_VERSIONED != 0 || le32(&fixed, 28) != 0 {
            return Err(invalid("bundle: unknown header flags"));
        }
        r.header = BundleHeader {
            flags,
            cache_version: le64(&fixed, 16),
            identity,
        };
        Ok(r)
    }

    /// Identity and version of the entries.
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    /// The next entry; `None` after the end marker, once its count and the bundle's length
    /// have been checked.
    pub fn next_entry(&mut self) -> Result<Option<BundleEntry>> {
        if self.done {
            return Ok(None);
        }
        let at = self.pos;
        let head = self.take(ITEM_HEADER_LEN)?;
        match le32(&head, 0) {
            TAG_RECORD => {
                let key_len = u64::from(le32(&head, 4));
                let value_len = u64::from(le32(&head, 8));
                if key_len > MAX_KEY_LEN as u64 {
                    return Err(self.bad(at, "key longer than 65,535 bytes"));
                }
                let key = self.take(key_len)?;
                let value = self.take(value_len)?;
                if record_crc(&head[..12], &key, &value) != le32(&head, 12) {
                    return Err(self.bad(at, "entry checksum mismatch"));
                }
                self.count += 1;
                Ok(Some(BundleEntry { key, value }))
            }
            TAG_END => {
                let crc = le32(&self.take(4)?, 0);
                if crc32c::crc32c(&head) != crc || le32(&head, 4) != 0 {
                    return Err(self.bad(at, "end marker checksum mismatch"));
                }
                if le64(&head, 8) != self.count {
                    return Err(self.bad(at, "entry count does not match: entries are missing"));
                }
                if self.remaining != 0 {
                    return Err(self.bad(self.pos, "bytes after the end marker"));
                }
                self.done = true;
                Ok(None)
            }
            _ => Err(self.bad(at, "unknown entry tag")),
        }
    }

    fn bad(&self, at: u64, what: &str) -> Error {
        invalid(format!("bundle: {what} (at byte {at})"))
    }

    /// Reads exactly `n` bytes, refusing before allocating if fewer remain.
    fn take(&mut self, n: u64) -> Result<Vec<u8>> {
        if n > self.remaining {
            return Err(self.bad(self.pos, "truncated"));
        }
        let mut buf = vec![0u8; n as usize];
        self.input
            .read_exact(&mut buf)
            .map_err(|e| match e.kind() {
                ErrorKind::UnexpectedEof => self.bad(self.pos, "truncated"),
                _ => Error::Io(e),
            })?;
        self.remaining -= n;
        self.pos += n;
        Ok(buf)
    }
}

/// Parses a whole bundle held in memory. Never panics, whatever the bytes; any damage is an
/// error (no entry of a damaged bundle is returned).
pub fn parse_bundle(bytes: &[u8]) -> Result<Bundle> {
    let mut reader = BundleReader::new(bytes, bytes.len() as u64)?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry()? {
        entries.push(entry);
    }
    Ok(Bundle {
        header: reader.header.clone(),
        entries,
    })
}

/// What [`export_bundle`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Entries written.
    pub entries: u64,
    /// Key and value bytes written.
    pub key_value_bytes: u64,
    /// Live entries left out because their record is corrupt.
    pub corrupt_skipped: u64,
}

/// Writes every live entry of the cache directory `dir` to `out` as a bundle, from one
/// consistent snapshot (the shared lock is held throughout, so writers wait).
pub fn export_bundle(dir: &Path, out: &mut dyn Write) -> Result<ExportReport> {
    let snapshot = Snapshot::open(dir)?;
    let meta = snapshot.meta();
    let header = BundleHeader {
        flags: meta.flags,
        cache_version: meta.cache_version,
        identity: meta.identity.clone(),
    };
    let mut writer = BundleWriter::new(out, &header)?;
    let mut report = ExportReport::default();
    report.corrupt_skipped = snapshot.for_each_entry(&mut |key, value| {
        report.entries += 1;
        report.key_value_bytes += (key.len() + value.len()) as u64;
        writer.push(key, value)
    })?;
    writer.finish()?;
    Ok(report)
}
