//! Read-only views of a cache directory, for tools: what a directory is, a consistent
//! snapshot of its index, its entries and values, verification of every byte, and export
//! bundles. Published as [`crate::inspect`], with the maintenance functions there.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::dir;
use super::format::{
    self, decode_record, peek_key, record_key_value, record_value, RecordHeader, RECORD_HEADER_LEN,
};
use super::index::{Index, Loc};
use crate::codec::FormatError;
use crate::{Error, Identity, Result};

/// Bytes read from a data file at a time when scanning it.
const CHUNK: u64 = 4 << 20;

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}

pub(crate) fn io_at(path: &Path, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------
// What a directory is.

/// What a directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirKind {
    /// A cache directory, with the identity of its meta file.
    Cache(Identity),
    /// A driver-versioned root (no meta file): its `id-<16 hex>` cache directories.
    VersionedRoot(Vec<PathBuf>),
}

/// Says what `dir` is. Fails with a message that says why when it is neither a cache
/// directory nor a driver-versioned root: missing, no meta file, corrupt meta file, or a
/// meta file of another format version.
pub fn classify(dir: &Path) -> Result<DirKind> {
    let meta_path = dir.join(dir::META_FILE);
    match fs::read(&meta_path) {
        Ok(bytes) => match format::decode_meta(&bytes) {
            Ok(identity) => Ok(DirKind::Cache(identity)),
            Err(FormatError::Version(v)) => Err(invalid(format!(
                "{}: format version {v}; this build reads version {FORMAT_VERSION}",
                meta_path.display()
            ))),
            Err(e) => Err(invalid(format!("{}: corrupt ({e})", meta_path.display()))),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if !dir.is_dir() {
                return Err(invalid(format!("{}: no such directory", dir.display())));
            }
            let ids = identity_dirs(dir)?;
            if ids.is_empty() {
                return Err(invalid(format!(
                    "{}: not a gpucache directory (no meta file)",
                    dir.display()
                )));
            }
            Ok(DirKind::VersionedRoot(ids))
        }
        Err(e) => Err(io_at(&meta_path, e)),
    }
}

/// Whether `name` is that of an identity's subdirectory of a driver-versioned root:
/// `id-<16 hex digits>`.
pub fn is_identity_dir_name(name: &str) -> bool {
    dir::is_identity_subdir_name(name)
}

/// The `id-<16 hex digits>` subdirectories of `root`, sorted by name.
pub fn identity_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| io_at(root, e))? {
        let entry = entry.map_err(|e| io_at(root, e))?;
        let name = entry.file_name();
        let is_id = name.to_str().is_some_and(dir::is_identity_subdir_name);
        if is_id && entry.path().is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The identity in the meta file of the cache directory `dir`; for a driver-versioned root,
/// an error that lists the root's cache directories.
pub fn read_meta(dir: &Path) -> Result<Identity> {
    match classify(dir)? {
        DirKind::Cache(meta) => Ok(meta),
        DirKind::VersionedRoot(ids) => {
            let list: Vec<String> = ids.iter().map(|p| p.display().to_string()).collect();
            Err(invalid(format!(
                "{} is a driver-versioned root, not a cache directory; pass one of its \
                 cache directories: {}",
                dir.display(),
                list.join(", ")
            )))
        }
    }
}

// ---------------------------------------------------------------------------------------
// A consistent read-only view.

/// Sizes and space use of a cache directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Segments with a readable index file.
    pub segments: u64,
    /// Segments whose index file header is unreadable (ignored by the library).
    pub bad_segments: u64,
    /// Live entries (the latest record of each key).
    pub live_entries: u64,
    /// Bytes of live records: record headers, keys and values.
    pub live_bytes: u64,
    /// Bytes of live keys and values only.
    pub key_value_bytes: u64,
    /// Bytes of every `seg-*` file in the directory, as the file system reports them.
    pub file_bytes: u64,
    /// Bytes of records that are not live (overwritten, removed, tombstones): what
    /// [`compact`](crate::inspect::compact) reclaims.
    pub dead_bytes: u64,
}

impl DirStats {
    /// File bytes ÷ live key and value bytes; `None` when nothing is live.
    pub fn space_amplification(&self) -> Option<f64> {
        (self.key_value_bytes > 0).then(|| self.file_bytes as f64 / self.key_value_bytes as f64)
    }
}

/// One live entry, as listed by [`Snapshot::entries`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// The full key.
    pub key: Vec<u8>,
    /// The value's length in bytes.
    pub value_len: u32,
    /// Segment holding the record.
    pub segment: u32,
    /// Offset of the record in the segment's data file.
    pub offset: u32,
}

/// The live entries of a directory, in (segment, offset) order: write order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Entries whose key could be read and matches its hash.
    pub entries: Vec<EntryInfo>,
    /// Live entries left out because their record header or key is unreadable.
    pub unreadable: u64,
}

/// What [`Snapshot::get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordLookup {
    /// The value, checked against its record's CRC.
    Found(Vec<u8>),
    /// No live entry for the key.
    Absent,
    /// The key's latest record fails its checks (why); no bytes are returned.
    Corrupt(String),
}

/// A read-only view of one cache directory: its meta and its index, loaded under the shared
/// directory lock, which is held until the snapshot is dropped (writers wait meanwhile, so
/// drop it before long output).
#[derive(Debug)]
pub struct Snapshot {
    dir: PathBuf,
    meta: Identity,
    index: Index,
    bad_segments: u64,
    _lock: Option<File>,
}

impl Snapshot {
    /// Opens `dir` (a cache directory, not a root) read-only and loads its index.
    pub fn open(dir: &Path) -> Result<Snapshot> {
        read_meta(dir)?;
        let lock = lock_shared(dir)?;
        let meta = read_meta(dir)?; // As of now that we hold the lock.
        let (index, bad_segments, _) = Index::load(dir).map_err(|e| io_at(dir, e))?;
        Ok(Snapshot {
            dir: dir.to_path_buf(),
            meta,
            index,
            bad_segments,
            _lock: lock,
        })
    }

    /// The identity in the directory's meta file.
    pub fn meta(&self) -> &Identity {
        &self.meta
    }

    /// Sizes and space use.
    pub fn stats(&self) -> Result<DirStats> {
        let (live_entries, live_bytes, _) = self.index.totals();
        let key_value_bytes = self
            .index
            .all_newest_first()
            .iter()
            .map(|(_, l)| u64::from(l.key_len) + u64::from(l.value_len))
            .sum();
        Ok(DirStats {
            segments: self.index.segs().len() as u64,
            bad_segments: self.bad_segments,
            live_entries,
            live_bytes,
            key_value_bytes,
            file_bytes: segment_file_bytes(&self.dir)?,
            dead_bytes: self.index.segs().values().map(|s| s.dead_bytes()).sum(),
        })
    }

    fn live_in_file_order(&self) -> Vec<(u64, Loc)> {
        let mut live = self.index.all_newest_first();
        live.sort_unstable_by_key(|(_, l)| (l.seg, l.offset));
        live
    }

    /// The live entries with their keys (one small read per entry; values are not read).
    pub fn entries(&self) -> Result<Listing> {
        let mut out = Listing::default();
        let mut files: BTreeMap<u32, Option<File>> = BTreeMap::new();
        for (hash, loc) in self.live_in_file_order() {
            let file = files
                .entry(loc.seg)
                .or_insert_with(|| File::open(dir::data_path(&self.dir, loc.seg)).ok());
            // The key, and the raw length that leads a compressed value.
            let len = RECORD_HEADER_LEN + usize::from(loc.key_len) + 4.min(loc.value_len as usize);
            let mut head = vec![0u8; len];
            let read = file
                .as_ref()
                .is_some_and(|f| f.read_exact_at(&mut head, u64::from(loc.offset)).is_ok());
            let key = peek_key(&head, hash, u32::from(loc.key_len), loc.value_len);
            if let Some(key) = key.filter(|_| read) {
                out.entries.push(EntryInfo {
                    key: key.to_vec(),
                    value_len: format::peek_raw_value_len(&head).unwrap_or(loc.value_len),
                    segment: loc.seg,
                    offset: loc.offset,
                });
            } else {
                out.unreadable += 1;
            }
        }
        Ok(out)
    }

    /// The value of `key`, read and checked (CRC, lengths, key hash, full key).
    pub fn get(&self, key: &[u8]) -> RecordLookup {
        let hash = format::disk_hash(key);
        let Some(loc) = self.index.get(hash) else {
            return RecordLookup::Absent;
        };
        let record = File::open(dir::data_path(&self.dir, loc.seg))
            .map_err(|e| format!("data file: {e}"))
            .and_then(|f| {
                let mut chunks = Chunks::new(f).map_err(|e| format!("data file: {e}"))?;
                chunks.min_read = 0; // One record: read just it.
                let (h, r) = checked_record(&mut chunks, hash, loc)?;
                if record_key_value(r, &h).0 != key {
                    return Ok(None);
                }
                record_value(r, &h, u64::from(u32::MAX))
                    .map(|v| Some(v.into_owned()))
                    .map_err(|e| e.to_string())
            });
        match record {
            Ok(Some(value)) => RecordLookup::Found(value),
            Ok(None) => RecordLookup::Absent, // Another key with the same hash.
            Err(why) => RecordLookup::Corrupt(format!(
                "segment {:08x} offset {}: {why}",
                loc.seg, loc.offset
            )),
        }
    }

    /// Calls `f(key, value)` for every live entry in (segment, offset) order, reading the
    /// data files sequentially; entries whose record fails its checks are skipped and
    /// counted in the result. Stops at the first error `f` returns.
    pub fn for_each_entry(&self, f: &mut EntryFn<'_>) -> Result<u64> {
        let mut skipped = 0;
        let mut current: Option<(u32, Option<Chunks>)> = None;
        for (hash, loc) in self.live_in_file_order() {
            if current.as_ref().map(|c| c.0) != Some(loc.seg) {
                let file = File::open(dir::data_path(&self.dir, loc.seg));
                current = Some((loc.seg, file.and_then(Chunks::new).ok()));
            }
            let chunks = current.as_mut().and_then(|c| c.1.as_mut());
            match chunks.map(|c| checked_record(c, hash, loc)) {
                Some(Ok((header, record))) => {
                    let (key, _) = record_key_value(record, &header);
                    match record_value(record, &header, u64::from(u32::MAX)) {
                        Ok(value) => f(key, &value)?,
                        Err(_) => skipped += 1,
                    }
                }
                _ => skipped += 1,
            }
        }
        Ok(skipped)
    }
}

/// A callback given each entry's key and value by [`Snapshot::for_each_entry`].
pub type EntryFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// Sizes and space use of the cache directory `dir`.
pub fn stats(dir: &Path) -> Result<DirStats> {
    Snapshot::open(dir)?.stats()
}

/// The live entries of the cache directory `dir`.
pub fn entries(dir: &Path) -> Result<Listing> {
    Snapshot::open(dir)?.entries()
}

/// The value of `key` in the cache directory `dir`.
pub fn get(dir: &Path, key: &[u8]) -> Result<RecordLookup> {
    Ok(Snapshot::open(dir)?.get(key))
}

/// Opens the lock file read-only and locks it shared; `None` if there is no lock file (no
/// writer ever opened the directory) or it may not be read (then we read without it, as the
/// library's readers always do: every record is checked anyway).
pub(super) fn lock_shared(dir: &Path) -> Result<Option<File>> {
    let path = dir.join(dir::LOCK_FILE);
    match File::open(&path) {
        Ok(f) => {
            f.lock_shared().map_err(|e| io_at(&path, e))?;
            Ok(Some(f))
        }
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => Ok(None),
        Err(e) => Err(io_at(&path, e)),
    }
}

pub(super) fn file_len(path: &Path) -> Result<Option<u64>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path, e)),
    }
}

/// Whether `dir` has a meta file (whatever its contents).
pub(crate) fn has_meta_file(dir: &Path) -> bool {
    dir.join(dir::META_FILE).exists()
}

/// Bytes of every segment file of `dir`, as the file system reports them.
pub(crate) fn segment_file_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for id in dir::segment_file_ids(dir).map_err(|e| io_at(dir, e))? {
        total += file_len(&dir::data_path(dir, id))?.unwrap_or(0);
        total += file_len(&dir::index_path(dir, id))?.unwrap_or(0);
    }
    Ok(total)
}

/// Reads one data file front to back in large chunks.
#[derive(Debug)]
pub(super) struct Chunks {
    file: File,
    pub(super) len: u64,
    /// Bytes read at least, when a read is needed.
    min_read: u64,
    start: u64,
    buf: Vec<u8>,
}

impl Chunks {
    pub(super) fn new(file: File) -> io::Result<Chunks> {
        let len = file.metadata()?.len();
        Ok(Chunks {
            file,
            len,
            min_read: CHUNK,
            start: 0,
            buf: Vec::new(),
        })
    }

    /// The `n` bytes at `off`; `None` if they lie past the end of the file. Never allocates
    /// more than the file holds.
    pub(super) fn get(&mut self, off: u64, n: u64) -> io::Result<Option<&[u8]>> {
        if off.checked_add(n).is_none_or(|end| end > self.len) {
            return Ok(None);
        }
        let buf_end = self.start + self.buf.len() as u64;
        if off < self.start || off + n > buf_end {
            let size = n.max(self.min_read).min(self.len - off);
            self.buf.resize(size as usize, 0);
            self.file.read_exact_at(&mut self.buf, off)?;
            self.start = off;
        }
        let at = (off - self.start) as usize;
        Ok(Some(&self.buf[at..at + n as usize]))
    }
}

/// Reads the record at `loc` and checks it as the library does before returning a value:
/// CRC, lengths and key hash against the index, not a tombstone.
fn checked_record(
    chunks: &mut Chunks,
    hash: u64,
    loc: Loc,
) -> std::result::Result<(RecordHeader, &[u8]), String> {
    let bytes = chunks
        .get(u64::from(loc.offset), loc.record_len())
        .map_err(|e| format!("read failed: {e}"))?
        .ok_or("record lies past the end of its data file")?;
    let h = decode_record(bytes, loc.record_len()).map_err(|e| e.to_string())?;
    if !loc.describes(hash, &h) || h.is_tombstone() {
        return Err("record disagrees with its index entry".into());
    }
    Ok((h, bytes))
}

mod bundle;
mod verify;

/// The on-disk format version this build reads and writes.
pub use super::format::FORMAT_VERSION;
pub use bundle::{
    export_bundle, parse_bundle, Bundle, BundleEntry, BundleReader, BundleWriter, ExportReport,
    BUNDLE_MAGIC, BUNDLE_VERSION,
};
pub use verify::{verify, VerifyReport};
