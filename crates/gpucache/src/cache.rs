//! The cache: the memory tier over the disk tier.
//!
//! - Opening returns once the index is loaded (cost proportional to the number of entries);
//!   a background thread then fills the memory tier from disk, newest segments first, until
//!   the memory budget is full.
//! - A lookup that misses memory reads the record from disk synchronously (one positioned
//!   read, checksum-verified) and promotes it into memory. Chromium's cache misses until the
//!   preload reaches the entry; a read costs tens of microseconds, a recompile milliseconds.
//! - A store goes into memory and onto the write-behind queue, and returns.
//! - Any disk failure degrades the cache to memory-only for that operation: it is counted in
//!   [`DiskStats`], logged through `tracing`, and never surfaces as a panic.
//!
//! Durability: a store is on disk once the write-behind thread has written its batch (within
//! milliseconds) and survives the process being killed from then on; it survives a power cut
//! once fsynced, which happens on [`Cache::flush`], when a segment fills, and on drop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::disk::format::{
    disk_hash, Meta, INDEX_ENTRY_LEN, MAX_KEY_LEN, META_FLAG_DRIVER_VERSIONED, RECORD_HEADER_LEN,
};
use crate::disk::writer::WriteBehind;
use crate::disk::{Disk, DiskConfig, DiskLookup, DiskStats};
use crate::hash::KeyHasher;
use crate::store::{copy_if_fits, Lookup, OnExisting, WhenFull};
use crate::{Error, PolicyKind, Result, Store, StoreBuilder, StoreStats};

/// Configures and opens a [`Cache`]; each setter states its default.
#[derive(Clone, Debug)]
pub struct CacheBuilder {
    dir: Option<PathBuf>,
    identity: Vec<u8>,
    version: u64,
    driver_versioned: bool,
    memory: StoreBuilder,
    max_disk_bytes: u64,
    max_disk_entries: u64,
    max_segment_bytes: u64,
    write_queue_bytes: u64,
    preload: bool,
}

impl Default for CacheBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl CacheBuilder {
    /// A memory-only cache until [`directory`](Self::directory) is set.
    pub fn new() -> Self {
        Self {
            dir: None,
            identity: Vec::new(),
            version: 0,
            driver_versioned: false,
            memory: StoreBuilder::new(),
            max_disk_bytes: 1 << 30,
            max_disk_entries: u64::MAX,
            max_segment_bytes: 128 << 20,
            write_queue_bytes: 64 << 20,
            preload: true,
        }
    }

    /// The directory of the disk tier. Default none (memory only).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// What makes stored entries valid: driver vendor, renderer and version, API, app
    /// version. A directory created for another identity is wiped, or, with
    /// [`driver_versioned`](Self::driver_versioned), kept beside this one. Default empty.
    pub fn identity(mut self, identity: impl Into<Vec<u8>>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The cache version; a directory of another version is wiped. Default 0.
    pub fn version(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// Keep caches of different identities side by side, each in a subdirectory named by
    /// the identity's hash, instead of wiping. Default `false`.
    pub fn driver_versioned(mut self, on: bool) -> Self {
        self.driver_versioned = on;
        self
    }

    /// Memory-tier byte budget. Default 64 MiB.
    pub fn max_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory = self.memory.max_bytes(bytes);
        self
    }

    /// Memory-tier entry budget. Default unbounded.
    pub fn max_memory_entries(mut self, entries: u64) -> Self {
        self.memory = self.memory.max_entries(entries);
        self
    }

    /// Largest value kept in memory. Default: what fits in one memory shard.
    pub fn max_value_size(mut self, bytes: u64) -> Self {
        self.memory = self.memory.max_value_size(bytes);
        self
    }

    /// Eviction policy of the memory tier; the disk tier keeps, when it evicts, what this
    /// policy keeps in memory. Default S3-FIFO.
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.memory = self.memory.policy(policy);
        self
    }

    /// Memory-tier shards. Default automatic (see [`StoreBuilder::shards`]).
    pub fn shards(mut self, shards: usize) -> Self {
        self.memory = self.memory.shards(shards);
        self
    }

    /// Memory-tier key hasher. Default XXH3 with a random seed.
    pub fn hasher(mut self, hasher: Arc<dyn KeyHasher>) -> Self {
        self.memory = self.memory.hasher(hasher);
        self
    }

    /// Byte limit of the directory (segment files). Default 1 GiB.
    pub fn max_disk_bytes(mut self, bytes: u64) -> Self {
        self.max_disk_bytes = bytes;
        self
    }

    /// Entry limit of the directory. Default unbounded.
    pub fn max_disk_entries(mut self, entries: u64) -> Self {
        self.max_disk_entries = entries;
        self
    }

    /// Largest segment (value file). Default 128 MiB, and at most an eighth of the byte
    /// limit so that evicting one segment frees at most an eighth of the cache.
    pub fn max_segment_bytes(mut self, bytes: u64) -> Self {
        self.max_segment_bytes = bytes;
        self
    }

    /// Bytes of stores waiting for the write-behind thread; past this, stores are not
    /// persisted (they stay in memory). Default 64 MiB.
    pub fn write_queue_bytes(mut self, bytes: u64) -> Self {
        self.write_queue_bytes = bytes;
        self
    }

    /// Fill the memory tier from disk in the background after opening. Default `true`.
    pub fn preload(mut self, on: bool) -> Self {
        self.preload = on;
        self
    }

    /// The directory this builder's cache lives in (the identity's subdirectory for a
    /// driver-versioned cache).
    pub fn resolved_directory(&self) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(if self.driver_versioned {
            dir.join(format!("id-{:016x}", disk_hash(&self.identity)))
        } else {
            dir.clone()
        })
    }

    /// Opens the cache. Fails only for invalid settings: a directory that cannot be used
    /// leaves a memory-only cache whose [`Cache::disk_error`] says why.
    pub fn open(self) -> Result<Cache> {
        let memory = Arc::new(self.memory.clone().build()?);
        let mut cache = Cache {
            memory,
            disk: None,
            writer: None,
            preload: None,
            disk_error: None,
        };
        let Some(dir) = self.resolved_directory() else {
            return Ok(cache);
        };
        if self.max_disk_bytes < 4096 {
            return Err(Error::InvalidArgument(
                "max_disk_bytes must be at least 4096".into(),
            ));
        }
        let cfg = DiskConfig {
            dir,
            meta: Meta {
                flags: if self.driver_versioned {
                    META_FLAG_DRIVER_VERSIONED
                } else {
                    0
                },
                cache_version: self.version,
                identity: self.identity.clone(),
            },
            max_bytes: self.max_disk_bytes,
            max_entries: self.max_disk_entries,
            segment_bytes: self
                .max_segment_bytes
                .min(self.max_disk_bytes / 8)
                .clamp(4096, u64::from(u32::MAX)),
        };
        let disk = match Disk::open(cfg) {
            Ok(disk) => Arc::new(disk),
            Err(e) => {
                let message = format!("disk tier unavailable, memory only: {e}");
                tracing::warn!(target: "gpucache", "{message}");
                cache.disk_error = Some(message);
                return Ok(cache);
            }
        };
        if disk.is_writable() {
            let memory = Arc::clone(&cache.memory);
            let is_hot = Box::new(move |key: &[u8]| memory.contains(key));
            match WriteBehind::spawn(Arc::clone(&disk), is_hot, self.write_queue_bytes) {
                Ok(writer) => cache.writer = Some(writer),
                Err(e) => cache.disk_error = Some(format!("no write-behind thread: {e}")),
            }
        }
        if self.preload {
            cache.preload = Preload::spawn(Arc::clone(&cache.memory), Arc::clone(&disk)).ok();
        }
        cache.disk = Some(disk);
        Ok(cache)
    }
}

/// A key/value cache with a memory tier over an optional persistent disk tier.
#[derive(Debug)]
pub struct Cache {
    memory: Arc<Store>,
    disk: Option<Arc<Disk>>,
    writer: Option<WriteBehind>,
    preload: Option<Preload>,
    disk_error: Option<String>,
}

/// What a cache lookup found, for the session layer.
pub(crate) enum CacheLookup {
    Hit(Bytes),
    Miss,
    Collision,
}

impl Cache {
    /// A builder with default settings.
    pub fn builder() -> CacheBuilder {
        CacheBuilder::new()
    }

    /// The value for `key`: from memory, or read from disk and kept in memory.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        match self.lookup(key) {
            CacheLookup::Hit(value) => Some(value),
            CacheLookup::Miss | CacheLookup::Collision => None,
        }
    }

    /// Copies the value for `key` into `buf` if it fits; returns its size if present.
    /// Nothing is written to `buf` unless it is large enough.
    pub fn get_into(&self, key: &[u8], buf: &mut [u8]) -> Option<usize> {
        let value = self.get(key)?;
        copy_if_fits(&value, buf);
        Some(value.len())
    }

    pub(crate) fn lookup(&self, key: &[u8]) -> CacheLookup {
        match self.memory.lookup(key) {
            Lookup::Hit(value) => return CacheLookup::Hit(value),
            Lookup::Collision => return CacheLookup::Collision,
            Lookup::Miss => {}
        }
        let Some(disk) = &self.disk else {
            return CacheLookup::Miss;
        };
        match disk.read(key) {
            DiskLookup::Hit(value) => {
                // Keep a newer value stored meanwhile; ignore a full memory tier.
                let _ = self.memory.insert_with(
                    key,
                    value.clone(),
                    OnExisting::Refuse,
                    WhenFull::Evict,
                );
                CacheLookup::Hit(value)
            }
            DiskLookup::Miss => CacheLookup::Miss,
            DiskLookup::Collision => CacheLookup::Collision,
        }
    }

    /// Stores `value` for `key`: into memory now, onto disk in the background. The newest
    /// value wins. Fails only if neither tier can take the value.
    pub fn insert(&self, key: &[u8], value: impl Into<Bytes>) -> Result<()> {
        let value = value.into();
        let in_memory = self.memory.insert(key, value.clone());
        let queued = self.persist(key, value);
        match in_memory {
            Err(Error::ValueTooLarge { .. }) if queued => Ok(()),
            other => other,
        }
    }

    /// Stores a new entry with the session rules (see [`crate::session`]).
    pub(crate) fn insert_new(&self, key: &[u8], value: Bytes, when_full: WhenFull) -> Result<()> {
        if let Some(disk) = &self.disk {
            if !self.memory.contains(key) && disk.has_hash_of(key) {
                return match disk.read(key) {
                    DiskLookup::Hit(_) => {
                        Err(Error::AlreadyExists("an entry with this key is stored"))
                    }
                    DiskLookup::Collision => Err(Error::HashCollision),
                    DiskLookup::Miss => self.insert_new_in_memory(key, value, when_full),
                };
            }
        }
        self.insert_new_in_memory(key, value, when_full)
    }

    fn insert_new_in_memory(&self, key: &[u8], value: Bytes, when_full: WhenFull) -> Result<()> {
        self.memory
            .insert_with(key, value.clone(), OnExisting::Refuse, when_full)?;
        self.persist(key, value);
        Ok(())
    }

    /// Whether adding a record of `key_len + value_len` bytes would take the directory past
    /// its byte limit (a D3D12 disk session refuses such a store with `CacheFull`).
    pub(crate) fn disk_would_overflow(&self, key_len: usize, value_len: usize) -> bool {
        self.disk.as_ref().is_some_and(|disk| {
            let record = RECORD_HEADER_LEN + INDEX_ENTRY_LEN + key_len + value_len;
            disk.file_bytes() + record as u64 > disk.max_bytes()
        })
    }

    /// Queues `key`/`value` for the disk; whether it was queued.
    fn persist(&self, key: &[u8], value: Bytes) -> bool {
        let (Some(writer), Some(disk)) = (&self.writer, &self.disk) else {
            return false;
        };
        if key.len() > MAX_KEY_LEN {
            disk.counters.add_too_large();
            return false;
        }
        writer.put(Bytes::copy_from_slice(key), value)
    }

    /// Removes `key` from both tiers; returns whether memory held it.
    pub fn remove(&self, key: &[u8]) -> bool {
        let was = self.memory.remove(key);
        if let Some(writer) = &self.writer {
            if key.len() <= MAX_KEY_LEN {
                writer.remove(Bytes::copy_from_slice(key));
            }
        }
        was
    }

    /// Removes every entry from both tiers. Fails if the disk tier exists but this process
    /// cannot write to it (memory is cleared all the same).
    pub fn clear(&self) -> Result<()> {
        self.memory.clear();
        self.writer_or_read_only()?
            .map_or(Ok(()), |w| Ok(w.clear()?))
    }

    /// Empties both tiers, stops writing to disk for good and removes the directory
    /// (delete-on-destroy). The cache keeps working from memory.
    pub fn delete_files(&self) -> Result<()> {
        self.clear()?;
        if let Some(disk) = &self.disk {
            disk.stop_writing();
            match std::fs::remove_dir_all(disk.dir()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes everything stored so far to disk and fsyncs it.
    pub fn flush(&self) -> Result<()> {
        if let Some(writer) = &self.writer {
            writer.flush()?;
        }
        Ok(())
    }

    /// Rewrites every sealed segment that holds dead records (reclaims all dead space).
    pub fn compact(&self) -> Result<()> {
        self.writer_or_read_only()?
            .map_or(Ok(()), |w| Ok(w.compact()?))
    }

    /// The writer, `None` for a memory-only cache, or an error for a disk tier this process
    /// cannot write.
    fn writer_or_read_only(&self) -> Result<Option<&WriteBehind>> {
        match (&self.disk, &self.writer) {
            (None, _) => Ok(None),
            (Some(disk), Some(writer)) if disk.is_writable() => Ok(Some(writer)),
            (Some(_), _) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the cache directory is not writable by this process",
            ))),
        }
    }

    /// Blocks until the start-up preload has finished.
    pub fn wait_for_preload(&self) {
        if let Some(preload) = &self.preload {
            preload.wait();
        }
    }

    /// Counters of both tiers.
    pub fn stats(&self) -> CacheStats {
        let memory = self.memory.stats();
        let disk = self.disk.as_ref().map(|d| d.stats());
        let disk_hits = disk.as_ref().map_or(0, |d| d.read_hits);
        let lookups = memory.hits + memory.misses;
        CacheStats {
            hits: memory.hits + disk_hits,
            misses: lookups - memory.hits - disk_hits.min(memory.misses),
            memory,
            disk,
            disk_error: self.disk_error.clone(),
        }
    }

    /// Why the disk tier is unavailable, if it is.
    pub fn disk_error(&self) -> Option<&str> {
        self.disk_error.as_deref()
    }

    /// The directory of the disk tier, if there is one.
    pub fn directory(&self) -> Option<&std::path::Path> {
        self.disk.as_ref().map(|d| d.dir())
    }

    /// The memory tier.
    pub fn memory(&self) -> &Store {
        &self.memory
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let Some(preload) = self.preload.take() {
            preload.stop();
        }
        // Dropping the writer drains its queue, fsyncs and joins it.
        self.writer.take();
    }
}

/// Counters of a [`Cache`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups answered, from memory or disk.
    pub hits: u64,
    /// Lookups that found nothing in either tier.
    pub misses: u64,
    /// The memory tier's counters (its misses include lookups the disk then answered).
    pub memory: StoreStats,
    /// The disk tier's counters, if there is a disk tier.
    pub disk: Option<DiskStats>,
    /// Why there is no disk tier, if one was asked for.
    pub disk_error: Option<String>,
}

/// The start-up preload thread.
#[derive(Debug)]
struct Preload {
    stop: Arc<AtomicBool>,
    done: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Preload {
    fn spawn(memory: Arc<Store>, disk: Arc<Disk>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
            std::thread::Builder::new()
                .name("gpucache-preload".into())
                .spawn(move || {
                    preload(&memory, &disk, &stop);
                    *done.0.lock() = true;
                    done.1.notify_all();
                })?
        };
        Ok(Self {
            stop,
            done,
            thread: Some(thread),
        })
    }

    fn wait(&self) {
        let mut done = self.done.0.lock();
        while !*done {
            self.done.1.wait(&mut done);
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Fills `memory` from `disk`, newest segments first, until the memory budget refuses more.
fn preload(memory: &Store, disk: &Disk, stop: &AtomicBool) {
    const GIVE_UP_AFTER_FULL: u32 = 64;
    let order = disk.preload_order();
    let mut loaded = 0u64;
    let mut full_in_a_row = 0u32;
    let mut start = 0;
    while start < order.len() && !stop.load(Ordering::Acquire) {
        let seg = order[start].1.seg;
        let end = start
            + order[start..]
                .iter()
                .take_while(|(_, l)| l.seg == seg)
                .count();
        disk.read_run(&order[start..end], &mut |key, value| {
            let copy = Bytes::copy_from_slice(value);
            match memory.insert_with(key, copy, OnExisting::Refuse, WhenFull::Refuse) {
                Ok(()) => {
                    loaded += 1;
                    full_in_a_row = 0;
                }
                Err(Error::CacheFull { .. }) => full_in_a_row += 1,
                Err(_) => {}
            }
            full_in_a_row < GIVE_UP_AFTER_FULL && !stop.load(Ordering::Acquire)
        });
        if full_in_a_row >= GIVE_UP_AFTER_FULL {
            break;
        }
        start = end;
    }
    disk.counters.add_preloaded(loaded);
}
