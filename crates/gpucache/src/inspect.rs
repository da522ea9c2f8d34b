//! Inspection and maintenance of cache directories, for tools such as the `gpucache` command.
//!
//! A cache directory holds `meta`, `lock` and `seg-XXXXXXXX.dat`/`.idx` files
//! (`docs/disk-format.md`); a driver-versioned root holds one such directory per identity,
//! named `id-<16 hex digits>`. The functions here:
//!
//! - **Read** ([`read_meta`], [`Snapshot`], [`stats`], [`entries`], [`get`], [`verify`],
//!   [`export_bundle`]) without writing anything: files are opened read-only, so they work on
//!   a read-only directory. They hold the directory's `lock` *shared* while they read, so no
//!   writer's batch is half-applied under them (writers wait for at most that long).
//! - **Maintain** ([`clear`], [`compact`], [`import_bundle`]) under the exclusive lock that
//!   writers take, so they are safe while other processes use the cache.
//! - **Bundle** ([`BundleWriter`], [`BundleReader`], [`parse_bundle`]): a single-file copy of
//!   a cache's live entries (`docs/bundle-format.md`). Parsing never panics and checks every
//!   length against the bytes that remain before allocating.
//!
//! The live entries are found exactly as the library finds them: the index files are applied
//! in (segment, offset) order, the latest record of a key wins and a tombstone removes it.
//! Every value returned has passed its record's CRC32C, key-hash and length checks.
//!
//! Errors are [`Error::Io`] for operating-system failures and [`Error::InvalidArgument`] for
//! everything else: not a cache directory, a corrupt meta file or bundle, a mismatch.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::disk::dir;
use crate::disk::format::{
    self, disk_hash, FormatError, RecordHeader, SegmentFile, FORMAT_VERSION, INDEX_ENTRY_LEN,
    META_FLAG_DRIVER_VERSIONED, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::disk::index::{Index, Loc};
use crate::{Error, Result};

/// Bytes read from a data file at a time when scanning it.
const CHUNK: u64 = 4 << 20;

fn invalid(message: impl Into<String>) -> Error {
    Error::InvalidArgument(message.into())
}

fn io_at(path: &Path, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------
// What a directory is.

/// The meta file of a cache directory: what the directory was created for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheMeta {
    /// On-disk format version (this build reads version 1 only).
    pub format_version: u32,
    /// Meta flags; bit 0 is driver-versioned.
    pub flags: u32,
    /// The cache version the application opened it with.
    pub cache_version: u64,
    /// The identity (driver, API, application build): opaque bytes, often text.
    pub identity: Vec<u8>,
}

impl CacheMeta {
    /// Whether the directory is one identity's subdirectory of a driver-versioned root.
    pub fn driver_versioned(&self) -> bool {
        self.flags & META_FLAG_DRIVER_VERSIONED != 0
    }
}

/// What a directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirKind {
    /// A cache directory, with its meta file.
    Cache(CacheMeta),
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
            Ok(m) => Ok(DirKind::Cache(CacheMeta {
                format_version: FORMAT_VERSION,
                flags: m.flags,
                cache_version: m.cache_version,
                identity: m.identity,
            })),
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

/// The `id-<16 hex digits>` subdirectories of `root`, sorted by name.
pub fn identity_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| io_at(root, e))? {
        let entry = entry.map_err(|e| io_at(root, e))?;
        let name = entry.file_name();
        let is_id = name
            .to_str()
            .and_then(|n| n.strip_prefix("id-"))
            .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if is_id && entry.path().is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The meta of the cache directory `dir`; for a driver-versioned root, an error that lists
/// the root's cache directories.
pub fn read_meta(dir: &Path) -> Result<CacheMeta> {
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
    /// [`compact`] reclaims.
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
pub enum Lookup {
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
    meta: CacheMeta,
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
        let (index, bad_segments) = load_index(dir)?;
        Ok(Snapshot {
            dir: dir.to_path_buf(),
            meta,
            index,
            bad_segments,
            _lock: lock,
        })
    }

    /// The directory's meta.
    pub fn meta(&self) -> &CacheMeta {
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
            let mut head = vec![0u8; RECORD_HEADER_LEN + usize::from(loc.key_len)];
            let read = file
                .as_ref()
                .is_some_and(|f| f.read_exact_at(&mut head, u64::from(loc.offset)).is_ok());
            let key = &head[RECORD_HEADER_LEN..];
            let lens_match = head[4..8] == u32::from(loc.key_len).to_le_bytes()
                && head[8..12] == loc.value_len.to_le_bytes();
            if read && lens_match && disk_hash(key) == hash {
                out.entries.push(EntryInfo {
                    key: key.to_vec(),
                    value_len: loc.value_len,
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
    pub fn get(&self, key: &[u8]) -> Lookup {
        let hash = disk_hash(key);
        let Some(loc) = self.index.get(hash) else {
            return Lookup::Absent;
        };
        let record = File::open(dir::data_path(&self.dir, loc.seg))
            .map_err(|e| format!("data file: {e}"))
            .and_then(|f| {
                let mut chunks = Chunks::new(f).map_err(|e| format!("data file: {e}"))?;
                chunks.min_read = 0; // One record: read just it.
                checked_record(&mut chunks, hash, loc).map(|(_, r)| r.to_vec())
            });
        let key_end = RECORD_HEADER_LEN + usize::from(loc.key_len);
        match record {
            Ok(r) if r[RECORD_HEADER_LEN..key_end] == *key => Lookup::Found(r[key_end..].to_vec()),
            Ok(_) => Lookup::Absent, // Another key with the same hash.
            Err(why) => Lookup::Corrupt(format!(
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
                Some(Ok((_, record))) => {
                    let key_end = RECORD_HEADER_LEN + usize::from(loc.key_len);
                    f(&record[RECORD_HEADER_LEN..key_end], &record[key_end..])?;
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
pub fn get(dir: &Path, key: &[u8]) -> Result<Lookup> {
    Ok(Snapshot::open(dir)?.get(key))
}

/// Opens the lock file read-only and locks it shared; `None` if there is no lock file (no
/// writer ever opened the directory) or it may not be read (then we read without it, as the
/// library's readers always do: every record is checked anyway).
fn lock_shared(dir: &Path) -> Result<Option<File>> {
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

/// Loads the index from the index files as the library does when it opens a directory: a
/// segment whose header is bad is ignored (and counted), an invalid entry followed by valid
/// ones is skipped, invalid entries at the end are not applied.
fn load_index(dir: &Path) -> Result<(Index, u64)> {
    let mut index = Index::default();
    let mut bad = 0;
    for id in dir::list_segments(dir).map_err(|e| io_at(dir, e))? {
        let path = dir::index_path(dir, id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io_at(&path, e)),
        };
        if format::decode_segment_header(SegmentFile::Index, &bytes) != Ok(id) {
            bad += 1;
            continue;
        }
        let entries: Vec<_> = bytes[SEGMENT_HEADER_LEN..]
            .chunks_exact(INDEX_ENTRY_LEN)
            .map(format::decode_index_entry)
            .collect();
        let valid_end = entries.iter().rposition(|e| e.is_ok()).map_or(0, |i| i + 1);
        for entry in entries[..valid_end].iter().flatten() {
            index.apply(id, entry);
        }
        index.seg_mut(id).idx_consumed = (SEGMENT_HEADER_LEN + valid_end * INDEX_ENTRY_LEN) as u64;
    }
    Ok((index, bad))
}

/// Segment ids named by `seg-XXXXXXXX.dat` or `.idx` files, sorted and deduplicated.
fn segment_file_ids(dir: &Path) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_at(dir, e))? {
        let name = entry.map_err(|e| io_at(dir, e))?.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("seg-")) else {
            continue;
        };
        let hex = rest
            .strip_suffix(".dat")
            .or_else(|| rest.strip_suffix(".idx"));
        if let Some(id) = hex
            .filter(|h| h.len() == 8)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

fn file_len(path: &Path) -> Result<Option<u64>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path, e)),
    }
}

fn segment_file_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for id in segment_file_ids(dir)? {
        total += file_len(&dir::data_path(dir, id))?.unwrap_or(0);
        total += file_len(&dir::index_path(dir, id))?.unwrap_or(0);
    }
    Ok(total)
}

/// Reads one data file front to back in large chunks.
#[derive(Debug)]
struct Chunks {
    file: File,
    len: u64,
    /// Bytes read at least, when a read is needed.
    min_read: u64,
    start: u64,
    buf: Vec<u8>,
}

impl Chunks {
    fn new(file: File) -> io::Result<Chunks> {
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
    fn get(&mut self, off: u64, n: u64) -> io::Result<Option<&[u8]>> {
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
    let h = format::decode_record(bytes, loc.record_len()).map_err(|e| e.to_string())?;
    if h.key_hash != hash
        || h.key_len != u32::from(loc.key_len)
        || h.value_len != loc.value_len
        || h.is_tombstone()
    {
        return Err("record disagrees with its index entry".into());
    }
    Ok((h, bytes))
}

mod bundle;
mod maintain;
mod verify;

pub use bundle::{
    export_bundle, parse_bundle, Bundle, BundleEntry, BundleHeader, BundleReader, BundleWriter,
    ExportReport, BUNDLE_MAGIC, BUNDLE_VERSION,
};
pub use maintain::{cache_builder, clear, compact, import_bundle, CompactReport, ImportReport};
pub use verify::{verify, VerifyReport};
