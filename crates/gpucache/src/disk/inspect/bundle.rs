//! Bundles: a single-file copy of a cache's live entries (`docs/bundle-format.md`).

use std::io::{ErrorKind, Read, Write};
use std::path::Path;

use super::super::format::{MAX_KEY_LEN, META_FLAG_DRIVER_VERSIONED};
use super::{invalid, Snapshot};
use crate::codec::{LeReader, LeWriter};
use crate::identity::MAX_IDENTITY_LEN;
use crate::{Error, Identity, Result};

/// First bytes of a bundle file.
pub const BUNDLE_MAGIC: [u8; 8] = *b"GPUCBNDL";
/// The bundle format version this build writes and reads.
pub const BUNDLE_VERSION: u32 = 1;
const TAG_RECORD: u32 = 1;
const TAG_END: u32 = 2;
const BUNDLE_HEADER_LEN: u64 = 32;
const ITEM_HEADER_LEN: u64 = 16;

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
    /// Identity and version of the entries: the meta of the directory they came from.
    pub header: Identity,
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
    pub fn new(mut out: W, header: &Identity) -> Result<Self> {
        let identity = header.bytes();
        if identity.len() > MAX_IDENTITY_LEN {
            return Err(invalid("bundle identity longer than 64 KiB"));
        }
        let flags = if header.driver_versioned() {
            META_FLAG_DRIVER_VERSIONED
        } else {
            0
        };
        let mut b = Vec::with_capacity(BUNDLE_HEADER_LEN as usize + identity.len() + 4);
        LeWriter::new(&mut b)
            .bytes(&BUNDLE_MAGIC)
            .u32(BUNDLE_VERSION)
            .u32(flags)
            .u64(header.version())
            .u32(identity.len() as u32)
            .u32(0)
            .bytes(identity)
            .crc32c_from(0);
        out.write_all(&b)?;
        Ok(BundleWriter { out, count: 0 })
    }

    /// Appends one entry.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let value_len = u32::try_from(value.len()).map_err(|_| invalid("value over 4 GiB"))?;
        if key.len() > MAX_KEY_LEN {
            return Err(invalid("key longer than 65,535 bytes"));
        }
        let mut head = Vec::with_capacity(ITEM_HEADER_LEN as usize);
        LeWriter::new(&mut head)
            .u32(TAG_RECORD)
            .u32(key.len() as u32)
            .u32(value_len);
        let crc = record_crc(&head, key, value);
        LeWriter::new(&mut head).u32(crc);
        self.out.write_all(&head)?;
        self.out.write_all(key)?;
        self.out.write_all(value)?;
        self.count += 1;
        Ok(())
    }

    /// Writes the end marker (with the entry count) and returns the writer.
    pub fn finish(mut self) -> Result<W> {
        let mut end = Vec::with_capacity(20);
        LeWriter::new(&mut end)
            .u32(TAG_END)
            .u32(0)
            .u64(self.count)
            .crc32c_from(0);
        self.out.write_all(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn record_crc(head: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let crc = crc32c::crc32c(head);
    crc32c::crc32c_append(crc32c::crc32c_append(crc, key), value)
}

/// The little-endian words of bytes that `take` returned in full.
fn words<const N: usize>(b: &[u8]) -> [u32; N] {
    let mut r = LeReader::new(b);
    std::array::from_fn(|_| r.u32().unwrap_or(0))
}

/// Reads a bundle entry by entry, checking as it goes: a damaged, truncated or extended
/// bundle is an error, never an altered entry. Memory use is bounded by the largest entry,
/// and no length is trusted before it is checked against the bytes that remain.
#[derive(Debug)]
pub struct BundleReader<R: Read> {
    input: R,
    remaining: u64,
    pos: u64,
    header: Identity,
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
            header: Identity::default(),
            count: 0,
            done: false,
        };
        let fixed = r.take(BUNDLE_HEADER_LEN)?;
        let [version, flags, version_lo, version_hi, identity_len, reserved] = words(&fixed[8..]);
        if fixed[..8] != BUNDLE_MAGIC {
            return Err(invalid("not a gpucache bundle (bad magic)"));
        }
        if version != BUNDLE_VERSION {
            return Err(invalid(format!(
                "bundle format version {version}; this build reads version {BUNDLE_VERSION}"
            )));
        }
        let identity_len = u64::from(identity_len);
        if identity_len > MAX_IDENTITY_LEN as u64 {
            return Err(invalid("bundle: identity longer than 64 KiB"));
        }
        let identity = r.take(identity_len)?;
        let [crc] = words(&r.take(4)?);
        let crc_want = crc32c::crc32c_append(crc32c::crc32c(&fixed), &identity);
        if crc != crc_want {
            return Err(invalid("bundle: header checksum mismatch"));
        }
        if flags & !META_FLAG_DRIVER_VERSIONED != 0 || reserved != 0 {
            return Err(invalid("bundle: unknown header flags"));
        }
        r.header = Identity::new(identity)
            .with_version(u64::from(version_lo) | (u64::from(version_hi) << 32))
            .with_driver_versioned(flags & META_FLAG_DRIVER_VERSIONED != 0);
        Ok(r)
    }

    /// Identity and version of the entries.
    pub fn header(&self) -> &Identity {
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
        let [tag, a, b, c] = words(&head);
        match tag {
            TAG_RECORD => {
                let (key_len, value_len, crc) = (u64::from(a), u64::from(b), c);
                if key_len > MAX_KEY_LEN as u64 {
                    return Err(self.bad(at, "key longer than 65,535 bytes"));
                }
                let key = self.take(key_len)?;
                let value = self.take(value_len)?;
                if record_crc(&head[..12], &key, &value) != crc {
                    return Err(self.bad(at, "entry checksum mismatch"));
                }
                self.count += 1;
                Ok(Some(BundleEntry { key, value }))
            }
            TAG_END => {
                let [crc] = words(&self.take(4)?);
                if crc32c::crc32c(&head) != crc || a != 0 {
                    return Err(self.bad(at, "end marker checksum mismatch"));
                }
                let count = u64::from(b) | (u64::from(c) << 32);
                if count != self.count {
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
    let mut writer = BundleWriter::new(out, snapshot.meta())?;
    let mut report = ExportReport::default();
    report.corrupt_skipped = snapshot.for_each_entry(&mut |key, value| {
        report.entries += 1;
        report.key_value_bytes += (key.len() + value.len()) as u64;
        writer.push(key, value)
    })?;
    writer.finish()?;
    Ok(report)
}
