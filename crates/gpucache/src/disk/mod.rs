//! The disk tier: a directory of append-only segments shared by any number of processes.
//!
//! Reads take no file lock: a record is found through the in-memory index, read with one
//! positioned read and checked (CRC, lengths, key hash, full key) before it is returned, so
//! a record that another process is appending, evicting or compacting is at worst a miss.
//! Writes happen on the write-behind thread ([`writer`]), each batch under an exclusive
//! `flock` of the directory's lock file. `docs/disk-format.md` describes the files.

pub(crate) mod dir;
pub mod format;
pub(crate) mod index;
mod stats;
mod write;
pub(crate) mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use format::{
    decode_index_entry, decode_record, decode_segment_header, disk_hash, Meta, RecordHeader,
    SegmentFile, INDEX_ENTRY_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use index::{whole_entries, Index, Loc};
pub(crate) use stats::DiskCounters;
pub use stats::DiskStats;

/// How often a miss may re-read the index files for other processes' appends.
const REFRESH_INTERVAL: Duration = Duration::from_millis(20);

/// Settings of one disk cache.
#[derive(Clone, Debug)]
pub(crate) struct DiskConfig {
    /// The cache's own directory (for driver-versioned caches, the identity's subdirectory).
    pub dir: PathBuf,
    pub meta: Meta,
    pub max_bytes: u64,
    pub max_entries: u64,
    pub segment_bytes: u64,
}

/// What a disk lookup found.
pub(crate) enum DiskLookup {
    Hit(Bytes),
    Miss,
    Collision,
}

#[derive(Debug)]
pub(crate) struct Disk {
    cfg: DiskConfig,
    /// False for a read-only directory, or after another identity took the directory over.
    writable: AtomicBool,
    index: RwLock<Index>,
    /// Serializes refreshes; holds when the last one ran.
    refresh_gate: Mutex<Instant>,
    /// Data files open for reading, by segment.
    read_files: Mutex<HashMap<u32, Arc<File>>>,
    pub(crate) counters: DiskCounters,
}

impl Disk {
    /// Opens (creating if needed) the cache directory, wiping it if it belongs to another
    /// format version or identity, and loads the index. Cost: proportional to the number of
    /// entries (the index files), not to the bytes stored.
    pub(crate) fn open(cfg: DiskConfig) -> io::Result<Disk> {
        if let Err(e) = std::fs::create_dir_all(&cfg.dir) {
            if !cfg.dir.is_dir() {
                return Err(e);
            }
        }
        let (lock, writable) = dir::open_lock(&cfg.dir)?;
        if writable {
            lock.lock()?;
            let result = ensure_identity(&cfg.dir, &cfg.meta);
            lock.unlock()?;
            result?;
        } else if dir::read_meta(&cfg.dir)?.as_ref() != Some(&cfg.meta) {
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "read-only cache directory holds another identity or format version",
            ));
        }
        let disk = Disk {
            cfg,
            writable: AtomicBool::new(writable),
            index: RwLock::new(Index::default()),
            refresh_gate: Mutex::new(Instant::now()),
            read_files: Mutex::new(HashMap::new()),
            counters: DiskCounters::default(),
        };
        if !writable {
            disk.counters
                .set_error("cache directory is read-only: serving what is there, writing nothing");
        }
        disk.refresh()?;
        Ok(disk)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Bytes of the segment files, as far as the index knows.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.index.read().totals().2
    }

    pub(crate) fn max_bytes(&self) -> u64 {
        self.cfg.max_bytes
    }

    /// Makes this process stop writing to the directory (it is being deleted).
    pub(crate) fn stop_writing(&self) {
        self.writable.store(false, Ordering::Release);
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.writable.load(Ordering::Acquire)
    }

    /// Looks `key` up on disk, reading and checking its record.
    pub(crate) fn read(&self, key: &[u8]) -> DiskLookup {
        let hash = disk_hash(key);
        let mut found = self.index.read().get(hash);
        if found.is_none() && self.refresh_due() {
            // Another process may have stored it since we last looked.
            if self.refresh().is_ok() {
                found = self.index.read().get(hash);
            }
        }
        let Some(loc) = found else {
            return DiskLookup::Miss;
        };
        match self.read_record(hash, loc) {
            Some((header, bytes)) => {
                let key_end = RECORD_HEADER_LEN + header.key_len as usize;
                if bytes[RECORD_HEADER_LEN..key_end] != *key {
                    return DiskLookup::Collision;
                }
                self.counters.add_read_hit();
                DiskLookup::Hit(Bytes::from(bytes).slice(key_end..))
            }
            None => DiskLookup::Miss,
        }
    }

    /// Whether a key with this key's disk hash is indexed (its record is not read).
    pub(crate) fn has_hash_of(&self, key: &[u8]) -> bool {
        self.index.read().get(disk_hash(key)).is_some()
    }

    /// Reads and checks the value record at `loc`; a bad or vanished record is forgotten,
    /// counted and reported as `None`.
    fn read_record(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        self.read_checked(hash, loc)
            .filter(|(h, _)| !h.is_tombstone())
    }

    /// Reads and checks the record at `loc`, value or tombstone (compaction copies both).
    pub(crate) fn read_raw(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        self.read_checked(hash, loc)
    }

    fn read_checked(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        let mut buf = vec![0u8; loc.record_len() as usize];
        let read = self
            .data_file(loc.seg)
            .and_then(|f| f.read_exact_at(&mut buf, u64::from(loc.offset)));
        if let Err(e) = read {
            if e.kind() != ErrorKind::NotFound && e.kind() != ErrorKind::UnexpectedEof {
                self.counters.add_read_error(&e);
            } else {
                self.counters.add_corrupt();
            }
            self.index.write().forget(hash, loc);
            return None;
        }
        match decode_record(&buf, self.cfg.segment_bytes.max(loc.record_len())) {
            Ok(header)
                if header.key_hash == hash
                    && header.value_len == loc.value_len
                    && header.key_len == u32::from(loc.key_len)
                    && header.is_tombstone() == loc.tombstone =>
            {
                Some((header, buf))
            }
            _ => {
                self.counters.add_corrupt();
                self.index.write().forget(hash, loc);
                None
            }
        }
    }

    fn data_file(&self, seg: u32) -> io::Result<Arc<File>> {
        if let Some(f) = self.read_files.lock().get(&seg) {
            return Ok(Arc::clone(f));
        }
        let file = Arc::new(File::open(dir::data_path(&self.cfg.dir, seg))?);
        self.read_files.lock().insert(seg, Arc::clone(&file));
        Ok(file)
    }

    fn refresh_due(&self) -> bool {
        self.refresh_gate.lock().elapsed() >= REFRESH_INTERVAL
    }

    /// Brings the index up to date with the index files: applies entries appended since the
    /// last refresh and forgets segments that were deleted.
    pub(crate) fn refresh(&self) -> io::Result<()> {
        let mut last = self.refresh_gate.lock();
        let ids = match dir::list_segments(&self.cfg.dir) {
            Ok(ids) => ids,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let known: Vec<u32> = self.index.read().segs().keys().copied().collect();
        for seg in known.into_iter().filter(|s| ids.binary_search(s).is_err()) {
            self.index.write().drop_segment(seg);
            self.read_files.lock().remove(&seg);
        }
        for id in ids {
            self.refresh_segment(id)?;
        }
        *last = Instant::now();
        Ok(())
    }

    fn refresh_segment(&self, id: u32) -> io::Result<()> {
        let consumed = self
            .index
            .read()
            .segs()
            .get(&id)
            .map_or(0, |s| s.idx_consumed);
        let file = match File::open(dir::index_path(&self.cfg.dir, id)) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let mut start = consumed;
        if consumed == 0 {
            if len < SEGMENT_HEADER_LEN as u64 {
                return Ok(()); // Being created.
            }
            let mut header = [0u8; SEGMENT_HEADER_LEN];
            file.read_exact_at(&mut header, 0)?;
            if decode_segment_header(SegmentFile::Index, &header) != Ok(id) {
                self.counters.add_corrupt();
                return Ok(()); // Ignored; the next writer removes it.
            }
            start = SEGMENT_HEADER_LEN as u64;
        }
        let n = whole_entries(start, len);
        let mut buf = vec![0u8; n as usize];
        file.read_exact_at(&mut buf, start)?;
        let mut ix = self.index.write();
        ix.seg_mut(id); // Known from now on, even if empty.
        let chunks: Vec<&[u8]> = buf.chunks_exact(INDEX_ENTRY_LEN).collect();
        let mut applied = 0u64;
        for (i, chunk) in chunks.iter().enumerate() {
            match decode_index_entry(chunk) {
                Ok(entry) => ix.apply(id, &entry),
                // A bad entry followed by good ones is damage: skip it. A bad tail may be
                // an append in progress: stop and look again next time.
                Err(_)
                    if chunks[i + 1..]
                        .iter()
                        .any(|c| decode_index_entry(c).is_ok()) =>
                {
                    self.counters.add_corrupt();
                }
                Err(_) => break,
            }
            applied += INDEX_ENTRY_LEN as u64;
        }
        ix.seg_mut(id).idx_consumed = start + applied;
        Ok(())
    }

    /// The live entries, newest segment first: (key hash, location) pairs for the preloader.
    pub(crate) fn preload_order(&self) -> Vec<(u64, Loc)> {
        self.index.read().all_newest_first()
    }

    /// Reads the records at `locs` (ascending offsets in one segment) with few large reads,
    /// calling `f(key, value)` for each record that checks out.
    pub(crate) fn read_run(&self, locs: &[(u64, Loc)], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        const CHUNK: u64 = 8 << 20;
        let mut i = 0;
        while i < locs.len() {
            let seg = locs[i].1.seg;
            let start = u64::from(locs[i].1.offset);
            let mut j = i;
            while j < locs.len()
                && locs[j].1.seg == seg
                && u64::from(locs[j].1.offset) + locs[j].1.record_len() - start
                    <= CHUNK.max(locs[i].1.record_len())
            {
                j += 1;
            }
            let end = u64::from(locs[j - 1].1.offset) + locs[j - 1].1.record_len();
            let mut buf = vec![0u8; (end - start) as usize];
            let ok = self
                .data_file(seg)
                .and_then(|file| file.read_exact_at(&mut buf, start))
                .is_ok();
            for &(hash, loc) in &locs[i..j] {
                let at = (u64::from(loc.offset) - start) as usize;
                let record = &buf[at..at + loc.record_len() as usize];
                match (ok, decode_record(record, loc.record_len())) {
                    (true, Ok(h))
                        if h.key_hash == hash
                            && h.value_len == loc.value_len
                            && h.key_len == u32::from(loc.key_len)
                            && !h.is_tombstone() =>
                    {
                        let key_end = RECORD_HEADER_LEN + h.key_len as usize;
                        if !f(&record[RECORD_HEADER_LEN..key_end], &record[key_end..]) {
                            return;
                        }
                    }
                    _ => {
                        self.counters.add_corrupt();
                        self.index.write().forget(hash, loc);
                    }
                }
            }
            i = j;
        }
    }

    /// Counters and gauges.
    pub(crate) fn stats(&self) -> DiskStats {
        let (entries, live_bytes, file_bytes, segments) = {
            let ix = self.index.read();
            let (e, l, f) = ix.totals();
            (e, l, f, ix.segs().len() as u64)
        };
        self.counters.snapshot(
            entries,
            live_bytes,
            file_bytes,
            segments,
            self.is_writable(),
        )
    }
}

/// Makes `dir` belong to `meta`: a missing, corrupt or different meta file wipes the
/// segments and writes ours. Called under the directory lock.
fn ensure_identity(dir: &Path, meta: &Meta) -> io::Result<()> {
    if dir::read_meta(dir)?.as_ref() == Some(meta) {
        return Ok(());
    }
    dir::remove_segments(dir)?;
    dir::write_meta(dir, meta)
}
