//! The disk tier: a directory of append-only segments shared by any number of processes,
//! as a [`Tier`] of a cache.
//!
//! Writes come from the cache's write-behind thread ([`Tier::write`]); each batch runs
//! under an exclusive `flock` of the directory's lock file ([`super::write`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};

use super::access::{self, DirAccess, DirHandle};
use super::dir::{self, At, FileStat};
use super::format::{INDEX_ENTRY_LEN, MAX_KEY_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::index::Index;
use super::lazy::{Cover, Lazy, OpenedLazily};
use super::stats::{DiskCounters, DiskStats};
use super::table::Table;
use super::write::{Active, Batch, WriteBuffers};
use crate::tier::{PreloadSink, Queued, Tier, TierStats, WriteContext, WriteOp};
use crate::{Identity, Lookup};

/// Settings of one disk cache.
#[derive(Clone, Debug)]
pub(crate) struct DiskConfig {
    /// The cache's own directory (for driver-versioned caches, the identity's subdirectory).
    pub dir: PathBuf,
    pub identity: Identity,
    pub max_bytes: u64,
    pub max_entries: u64,
    pub segment_bytes: u64,
    /// Modes of the directories gpucache creates (files follow their directory).
    pub access: DirAccess,
    /// Write even into a directory owned by another user.
    pub allow_foreign_owner: bool,
    /// Live entries from which writers keep the persisted hash table (`super::table`).
    pub table_min_entries: u64,
    /// What a `stat` of `dir` found just before the open, if it was made (the owner check).
    pub dir_stat: Option<std::fs::Metadata>,
    /// `dir` as the owner check opened it, if it did (that `stat` was of this descriptor).
    pub dir_fd: DirHandle,
}

/// States of `DiskTier::writable`.
const UNKNOWN: u8 = 0;
const WRITABLE: u8 = 1;
const READ_ONLY: u8 = 2;

/// What the write side keeps between batches (used by the write-behind thread only).
#[derive(Debug, Default)]
struct WriterState {
    active: Option<Active>,
    /// Kept across batches so that their capacity is allocated once.
    buffers: WriteBuffers,
    /// Records were written since the last fsync. A process that only read (a warm start)
    /// closes without taking the lock or fsyncing anything.
    unsynced: bool,
    /// Stores and removals whose batch failed since the last durable write (flush): that
    /// flush reports them.
    lost: u64,
}

#[derive(Debug)]
pub(crate) struct DiskTier {
    pub(super) cfg: DiskConfig,
    /// [`READ_ONLY`] for a read-only directory, or after another identity took the
    /// directory over; [`UNKNOWN`] after an open through the table until first asked.
    writable: AtomicU8,
    pub(super) index: RwLock<Index>,
    /// The persisted table lookups go through until `index` is full (`super::lazy`); `index`
    /// then holds only what was written after the table.
    pub(super) lazy: RwLock<Option<Lazy>>,
    /// The table no longer describes the directory: the next lookup builds the full index.
    pub(super) lazy_broken: AtomicBool,
    /// What the last table read or written covers.
    pub(super) cover: Mutex<Cover>,
    /// When this process opened the directory, and whether through the table: the preload
    /// then waits a little for the first lookup (`super::lazy`).
    pub(super) opened_at: Instant,
    pub(super) opened_lazily: AtomicBool,
    /// A lookup has finished (the flag is the fast path of the mutex).
    pub(super) looked_up: AtomicBool,
    pub(super) first_lookup: (Mutex<bool>, Condvar),
    /// Serializes refreshes; holds when the last one ran.
    pub(super) refresh_gate: Mutex<Instant>,
    /// Data files open for reading, by segment.
    pub(super) read_files: Mutex<HashMap<u32, ReadFile>>,
    /// The newest segment's index file as an open through the table found it, for the
    /// refresh that follows (`super::lazy`): not opened twice.
    pub(super) opened_index: Mutex<Option<OpenedIndex>>,
    /// A file the open used, closed by the next refresh (`DiskTier::defer_close`).
    pub(super) spent_file: Mutex<Option<File>>,
    pub(super) counters: DiskCounters,
    /// When a writer last looked for stale temporary files (`super::repair`).
    pub(super) last_sweep: Mutex<Option<Instant>>,
    writer: Mutex<WriterState>,
    /// The directory's descriptor the open used (`DiskConfig::dir_fd`), closed with the tier
    /// rather than on the way to the first hit.
    pub(super) dir_fd: Option<File>,
}

/// A data file kept open for reads, and whether it was opened through the directory's
/// descriptor (while serving through the table) rather than by path.
#[derive(Debug)]
pub(super) struct ReadFile {
    pub(super) file: Arc<File>,
    pub(super) through_dir_fd: bool,
}

/// The newest segment's index file as an open through the table found it.
#[derive(Debug)]
pub(super) struct OpenedIndex {
    pub(super) seg: u32,
    pub(super) file: File,
    pub(super) stat: FileStat,
}

impl DiskTier {
    /// Opens (creating if needed) the cache directory, wiping it if it belongs to another
    /// format version or identity, and loads the index: through the persisted table where
    /// one describes the directory (the cost is then that of the index entries written
    /// after it), else from the index files (proportional to the number of entries).
    pub(crate) fn open(mut cfg: DiskConfig) -> io::Result<DiskTier> {
        if let Err(e) = access::create_dir_all_known(&cfg.dir, cfg.access, cfg.dir_stat.take()) {
            if !cfg.dir.is_dir() {
                return Err(e);
            }
        }
        let dir_fd = cfg.dir_fd.take();
        let at = At::new(dir_fd.as_ref().map(AsFd::as_fd), &cfg.dir);
        // A table holding our identity in its copy of the meta file's bytes vouches for the
        // meta file: every wipe removes the table before it writes another, so reading
        // `meta` (four calls), or even a `stat` of it, is not needed.
        let vouched = match Table::open_at(at) {
            Ok(Some(table)) if table.header.vouches_for(&cfg.identity) => Some(table),
            _ => None,
        };
        // Whether this process may write: asked at once where the meta file must be read
        // (a wipe may follow), else when first needed (`is_writable`), after the first hit.
        let mut lock = None;
        let writable = if vouched.is_some() {
            UNKNOWN
        } else if dir::lock_writable(at) {
            // A lock file this process may write needs no opening yet (one `faccessat`,
            // where opening it is four calls): only a wipe below takes the lock at open.
            WRITABLE
        } else {
            let (file, writable) = dir::open_lock(&cfg.dir)?;
            lock = Some(file);
            if writable {
                WRITABLE
            } else {
                READ_ONLY
            }
        };
        let disk = DiskTier {
            cfg,
            writable: AtomicU8::new(UNKNOWN),
            index: RwLock::new(Index::default()),
            lazy: RwLock::new(None),
            lazy_broken: AtomicBool::new(false),
            cover: Mutex::new(Cover::default()),
            opened_at: Instant::now(),
            opened_lazily: AtomicBool::new(false),
            looked_up: AtomicBool::new(false),
            first_lookup: (Mutex::new(false), Condvar::new()),
            refresh_gate: Mutex::new(Instant::now()),
            read_files: Mutex::new(HashMap::new()),
            opened_index: Mutex::new(None),
            spent_file: Mutex::new(None),
            counters: DiskCounters::default(),
            last_sweep: Mutex::new(None),
            writer: Mutex::new(WriterState::default()),
            dir_fd,
        };
        if writable != UNKNOWN {
            disk.note_writable(writable == WRITABLE);
        }
        let at = At::new(disk.dir_fd.as_ref().map(AsFd::as_fd), &disk.cfg.dir);
        // Through the table only where it vouched for the meta file and describes the
        // directory's files (`super::lazy`); else the meta file is read and checked (a wipe
        // if it is not ours), and the index files are read.
        let lazy = match vouched.map(|table| disk.open_lazy(at, table)) {
            Some(Ok(Some(opened))) => Some(opened),
            Some(Err(e)) => {
                tracing::debug!(target: "gpucache", "not opening through the table: {e}");
                None
            }
            _ => None,
        };
        match lazy {
            Some(OpenedLazily::Current) => {}
            // The segments the table was checked against serve the first refresh too.
            Some(OpenedLazily::Refresh(ids)) => {
                disk.refresh_listed(ids)?;
                // Not to be taken for that file by a later refresh.
                if let Some(opened) = disk.opened_index.lock().take() {
                    disk.defer_close(opened.file);
                }
            }
            None => {
                disk.ensure_identity(lock)?;
                disk.refresh()?;
            }
        }
        if disk.index.read().has_suspects() && disk.is_writable() {
            // Damage found while loading: repaired under the lock before anything is served,
            // so that its intact records are. A failure is counted and the damage ignored.
            let mut w = disk.writer.lock();
            let _ = disk.with_batch(&mut w, |_| Ok(()));
        }
        Ok(disk)
    }

    /// Reads the meta file without the lock (it is replaced by rename, so read whole); one
    /// that is not ours is checked again under the lock and, if still not ours, the
    /// directory is wiped and ours written.
    fn ensure_identity(&self, lock: Option<File>) -> io::Result<()> {
        if matches!(dir::read_meta(&self.cfg.dir)?, Some(identity) if identity == self.cfg.identity)
        {
            return Ok(());
        }
        if !self.is_writable() {
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "read-only cache directory holds another identity or format version",
            ));
        }
        let lock = match lock {
            Some(file) => file,
            None => dir::open_lock(&self.cfg.dir)?.0,
        };
        lock.lock()?;
        let result = ensure_identity(&self.cfg.dir, &self.cfg.identity);
        lock.unlock()?;
        result
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Makes this process stop writing to the directory (it is being deleted).
    pub(crate) fn stop_writing(&self) {
        self.set_read_only();
    }

    /// This process can no longer write the directory (for good).
    pub(super) fn set_read_only(&self) {
        self.writable.store(READ_ONLY, Ordering::Release);
    }

    /// The largest key + value a record can hold: one record fills a segment at most.
    pub(crate) fn max_entry_len(&self) -> u64 {
        self.cfg
            .segment_bytes
            .saturating_sub((SEGMENT_HEADER_LEN + RECORD_HEADER_LEN) as u64)
    }

    pub(crate) fn is_writable(&self) -> bool {
        match self.writable.load(Ordering::Acquire) {
            WRITABLE => true,
            READ_ONLY => false,
            _ => self.ask_writable(),
        }
    }

    /// Finds whether this process may write the directory, as the open does: may it read and
    /// write the lock file (creating it if the directory is writable). An error (the
    /// directory vanished) decides nothing: the next batch recreates it or finds out.
    fn ask_writable(&self) -> bool {
        let writable = dir::lock_writable(At::path(&self.cfg.dir))
            || match dir::open_lock(&self.cfg.dir) {
                Ok((_, writable)) => writable,
                Err(_) => return true,
            };
        self.note_writable(writable);
        self.writable.load(Ordering::Acquire) == WRITABLE
    }

    /// Records what the open (or the first question after it) found, unless a batch found
    /// the directory read-only meanwhile.
    fn note_writable(&self, writable: bool) {
        let state = if writable { WRITABLE } else { READ_ONLY };
        let set =
            self.writable
                .compare_exchange(UNKNOWN, state, Ordering::AcqRel, Ordering::Acquire);
        if set.is_ok() && !writable {
            self.counters
                .set_error("cache directory is read-only: serving what is there, writing nothing");
            self.counters.set_failing();
        }
    }

    /// Rewrites every sealed segment that holds dead records (reclaims all dead space), and
    /// fsyncs. Called on the write-behind thread, after what was queued before it.
    pub(crate) fn compact(&self) -> io::Result<()> {
        let mut w = self.writer.lock();
        let result = self.with_batch(&mut w, |b| b.compact(true).and_then(|()| b.sync()));
        w.unsynced = result.is_err();
        result
    }

    /// Counters and gauges.
    pub(crate) fn disk_stats(&self) -> DiskStats {
        if let Err(e) = self.ensure_full() {
            self.counters.add_read_error(&e);
        }
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

    /// Builds the full index if this process still serves through the table, and repairs
    /// what that found damaged (as an open without a table does); whether the index is full.
    /// Not on a batch's path: it takes the writer.
    pub(crate) fn build_full_index(&self) -> bool {
        if self.lazy.read().is_none() {
            return true;
        }
        if let Err(e) = self.ensure_full() {
            self.counters.add_read_error(&e);
            return false;
        }
        if self.index.read().has_suspects() && self.is_writable() {
            let mut w = self.writer.lock();
            let _ = self.with_batch(&mut w, |_| Ok(()));
        }
        self.drop_table();
        true
    }

    /// On a durable write (a flush): an error if writes since the previous one failed, so
    /// that a flush never reports success for stores that are only in memory.
    fn take_lost(&self, w: &mut WriterState, durable: bool) -> io::Result<()> {
        if !durable || w.lost == 0 {
            return Ok(());
        }
        let lost = std::mem::take(&mut w.lost);
        let why = self.counters.last_error().unwrap_or_default();
        Err(io::Error::other(format!(
            "{lost} stores or removals since the last flush did not reach the disk ({why})"
        )))
    }

    /// Checks the index's invariants (tests and fuzzing only).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self) {
        self.index.read().validate();
    }

    /// Runs `f` in a locked batch; errors are counted and logged, never propagated as panics.
    fn with_batch(
        &self,
        w: &mut WriterState,
        f: impl FnOnce(&mut Batch<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let result = self
            .begin_batch(&mut w.active, &mut w.buffers)
            .and_then(|mut batch| f(&mut batch));
        match &result {
            Ok(()) => self.counters.note_write_ok(),
            Err(e) => {
                // Counted even when this process cannot write at all: a store that was
                // meant for the disk did not reach it.
                self.counters.add_write_error(e);
                // Reopen the segment next time: its lengths may be unknown after a failure.
                w.active = None;
            }
        }
        result
    }
}

impl Tier for DiskTier {
    fn name(&self) -> &str {
        "disk"
    }

    fn read(&self, key: &[u8]) -> Lookup {
        self.lookup(key)
    }

    fn write(&self, ops: &[WriteOp<'_>], ctx: &WriteContext<'_>) -> io::Result<()> {
        let mut w = self.writer.lock();
        let sync = ctx.durable() && (w.unsynced || !ops.is_empty());
        if ops.is_empty() && !sync {
            return self.take_lost(&mut w, ctx.durable());
        }
        let result = self.with_batch(&mut w, |batch| {
            for op in ops {
                let (key, value) = match op {
                    WriteOp::Put { key, value } => (key, Some(&value[..])),
                    WriteOp::Remove { key } => (key, None),
                };
                if key.len() > MAX_KEY_LEN {
                    // Such a key is never on disk: nothing to remove, nothing to store.
                    if value.is_some() {
                        self.counters.add_too_large();
                    }
                    continue;
                }
                batch.push(key, value)?;
            }
            batch.write_out()?;
            batch.enforce_limits(&|key| ctx.is_hot(key))?;
            batch.compact(false)?;
            if sync {
                batch.sync()?;
                // Advisory: a table that cannot be written leaves the old one, or none.
                if let Err(e) = self.write_table_if_due(false) {
                    tracing::debug!(target: "gpucache", "writing the hash table: {e}");
                }
            }
            Ok(())
        });
        // After an error, what reached the files is unknown: fsync at the next chance, unless
        // this process can no longer write there at all (nothing to make durable then).
        w.unsynced = self.is_writable()
            && if sync {
                result.is_err()
            } else {
                w.unsynced || !ops.is_empty()
            };
        if result.is_err() {
            w.lost += ops.len() as u64;
        } else if !ops.is_empty() {
            self.note_wrote();
        }
        match result {
            Ok(()) => self.take_lost(&mut w, ctx.durable()),
            Err(e) if ctx.durable() => {
                w.lost = 0;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn clear(&self) -> io::Result<()> {
        let mut w = self.writer.lock();
        self.with_batch(&mut w, |b| b.clear())
    }

    fn warm_up(&self) {
        self.build_full_index();
    }

    fn preload(&self, sink: &mut PreloadSink<'_>) {
        self.preload_into(sink);
    }

    fn would_overflow(&self, key_len: usize, value_len: usize, queued: Queued) -> bool {
        if let Err(e) = self.ensure_full() {
            self.counters.add_read_error(&e);
        }
        let per_record = (RECORD_HEADER_LEN + INDEX_ENTRY_LEN) as u64;
        let records =
            (queued.entries + 1) * per_record + queued.bytes + (key_len + value_len) as u64;
        // Each segment these records open costs its two file headers.
        let segments = 1 + records / self.cfg.segment_bytes.max(1);
        let needed = records + segments * 2 * SEGMENT_HEADER_LEN as u64;
        self.index.read().totals().2.saturating_add(needed) > self.cfg.max_bytes
    }

    fn stats(&self) -> TierStats {
        let d = self.disk_stats();
        let mut s = TierStats::new("disk");
        s.entries = d.entries;
        s.bytes = d.file_bytes;
        s.hits = d.read_hits;
        s.errors = d.read_errors + d.write_errors;
        s.last_error = d.last_error;
        s
    }
}

impl Drop for DiskTier {
    /// A process that wrote leaves a table that covers what it wrote, so that the next
    /// open reads none of it eagerly.
    fn drop(&mut self) {
        if !self.table_due_at_close() || !self.is_writable() {
            return;
        }
        let mut w = self.writer.lock();
        let _ = self.with_batch(&mut w, |_| self.write_table_if_due(true));
    }
}

/// Makes `dir` belong to `identity`: a missing, corrupt or different meta file wipes the
/// directory's contents and writes ours. Called under the directory lock.
fn ensure_identity(dir: &Path, identity: &Identity) -> io::Result<()> {
    if dir::read_meta(dir)?.as_ref() == Some(identity) {
        return Ok(());
    }
    dir::remove_contents(dir)?;
    dir::write_meta(dir, identity)
}
