//! The EGL_ANDROID_blob_cache contract (`set`/`get`) over a process-global cache.
//!
//! A driver calls `set(key, value)` and `get(key, buf)` from any thread at any time. The
//! rules, from the extension and Android's BlobCache:
//! - `set` is best effort and keeps the newest value. A value that cannot be stored (too
//!   large, or an empty value, which `get` could not tell from a miss) is dropped and the
//!   previous value of the key, if any, is kept.
//! - `get` returns the stored value's size, or 0 on a miss, and copies the value only when
//!   `buf` is large enough; otherwise it writes nothing. With
//!   [`BlobCacheConfig::miss_on_oversize`] a value larger than `buf` is answered with 0
//!   instead, which Mesa 25 needs: it reads its fixed 64 KiB buffer after any non-zero result.
//!
//! EGL callbacks carry no user pointer, so the cache the free functions use is process
//! global: [`configure`] it before installing the callbacks. Until then, and after
//! [`shutdown`], `set` is ignored and `get` misses.
//!
//! A cache with a directory keeps its counters there too, in the `blob-cache-stats` file
//! ([`diagnostics`]), updated on [`BlobCache::flush`] and when the cache is dropped, so that
//! `gpucache stats DIR` can show an integrator how the driver's calls went.

pub mod diagnostics;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use std::path::PathBuf;

use crate::disk::format::Meta;
use crate::session::CacheControl;
use crate::store::copy_if_fits;
use crate::{Cache, CacheBuilder, CacheStats, PolicyKind, Result, Store};
use diagnostics::Persister;
pub use diagnostics::{
    read_persisted_stats, BlobCounters, BlobStatsError, LastProcess, PersistedBlobStats,
};

/// Settings of a blob cache; each setter states its default.
#[derive(Clone, Debug)]
pub struct BlobCacheConfig {
    directory: Option<PathBuf>,
    identity: Vec<u8>,
    max_disk_bytes: u64,
    max_bytes: u64,
    max_entries: u64,
    max_key_size: usize,
    max_value_size: u64,
    miss_on_oversize: bool,
    policy: PolicyKind,
}

impl Default for BlobCacheConfig {
    fn default() -> Self {
        Self {
            directory: None,
            identity: Vec::new(),
            max_disk_bytes: 1 << 30,
            max_bytes: 64 << 20,
            max_entries: u64::MAX,
            max_key_size: 4 << 10,
            max_value_size: 4 << 20,
            miss_on_oversize: false,
            policy: PolicyKind::S3Fifo,
        }
    }
}

impl BlobCacheConfig {
    /// Persist the cache in this directory (shared by every process that configures the
    /// same directory and identity). Default none: memory only.
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// What the persisted entries depend on (driver vendor, renderer, version); a directory
    /// written for another identity is wiped. Default empty. Drivers put their own version in
    /// their keys too (the extension recommends it), so this is a second line of defence.
    pub fn identity(mut self, identity: impl Into<Vec<u8>>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Byte limit of the directory. Default 1 GiB (Mesa's default limit).
    pub fn max_disk_bytes(mut self, bytes: u64) -> Self {
        self.max_disk_bytes = bytes;
        self
    }

    /// Memory byte budget (keys + values + `ENTRY_OVERHEAD` per entry). Default 64 MiB.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Entry budget. Default unbounded.
    pub fn max_entries(mut self, entries: u64) -> Self {
        self.max_entries = entries;
        self
    }

    /// Largest key stored; longer keys are dropped by `set` and miss in `get`. Default 4 KiB
    /// (drivers use hashes of 20 to 32 bytes).
    pub fn max_key_size(mut self, bytes: usize) -> Self {
        self.max_key_size = bytes;
        self
    }

    /// Largest value stored. Default 4 MiB.
    pub fn max_value_size(mut self, bytes: u64) -> Self {
        self.max_value_size = bytes;
        self
    }

    /// Answer 0 (a miss) instead of the size when the value is larger than the caller's
    /// buffer. Default `false`, the extension's behaviour; turn it on for Mesa.
    pub fn miss_on_oversize(mut self, on: bool) -> Self {
        self.miss_on_oversize = on;
        self
    }

    /// Eviction policy. Default S3-FIFO.
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.policy = policy;
        self
    }
}

/// Counters of a blob cache: the cache's plus what a driver integrator needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlobCacheStats {
    /// The underlying cache's counters (memory tier, and disk tier if configured).
    pub cache: CacheStats,
    /// `get` calls that found a value larger than the caller's buffer.
    pub gets_buffer_too_small: u64,
    /// `set` calls dropped because the key or value was too large, or the value empty.
    pub sets_dropped: u64,
    /// Calls ignored because the driver-managed cache is disabled by cache control.
    pub calls_while_disabled: u64,
    /// `get` calls (not counting calls while disabled):
    /// `gets = hits + misses + gets_buffer_too_small`.
    pub gets: u64,
    /// `get` calls that copied a value into the caller's buffer.
    pub hits: u64,
    /// `get` calls that found no value.
    pub misses: u64,
    /// `set` calls (not counting calls while disabled), dropped ones included.
    pub sets: u64,
    /// Why the counters could not be added to the directory's `blob-cache-stats` file the
    /// last time that was tried; `None` when it worked or there is no directory.
    pub diagnostics_error: Option<String>,
}

impl BlobCacheStats {
    /// The blob-cache call counts, as persisted in the diagnostics file.
    pub fn counters(&self) -> BlobCounters {
        BlobCounters {
            gets: self.gets,
            hits: self.hits,
            misses: self.misses,
            gets_buffer_too_small: self.gets_buffer_too_small,
            sets: self.sets,
            sets_dropped: self.sets_dropped,
            calls_while_disabled: self.calls_while_disabled,
        }
    }
}

/// A cache with the blob-cache `set`/`get` semantics. The free functions of this module use a
/// process-global one; this type is for embedding and tests.
#[derive(Debug)]
pub struct BlobCache {
    cache: Cache,
    max_key_size: usize,
    /// Enforced here: with a directory, `Cache` would keep a larger value on disk.
    max_value_size: u64,
    /// Changed at run time by an install helper that recognises the driver.
    miss_on_oversize: AtomicBool,
    gets_buffer_too_small: AtomicU64,
    sets_dropped: AtomicU64,
    calls_while_disabled: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    sets: AtomicU64,
    /// Keeps the directory's diagnostics file; `None` without a usable directory.
    persister: Option<Persister>,
}

impl BlobCache {
    /// A cache with the given settings.
    pub fn new(config: BlobCacheConfig) -> Result<Self> {
        let mut builder = CacheBuilder::new()
            .max_memory_bytes(config.max_bytes)
            .max_memory_entries(config.max_entries)
            .max_value_size(config.max_value_size)
            .policy(config.policy);
        if let Some(dir) = config.directory {
            builder = builder
                .directory(dir)
                .identity(config.identity.clone())
                .max_disk_bytes(config.max_disk_bytes);
        }
        let cache = builder.open()?;
        // The meta `CacheBuilder` writes for these settings: version 0, no flags.
        let persister = cache.directory().map(|dir| {
            let meta = Meta {
                flags: 0,
                cache_version: 0,
                identity: config.identity,
            };
            Persister::new(dir.to_path_buf(), meta)
        });
        Ok(Self {
            cache,
            max_key_size: config.max_key_size,
            max_value_size: config.max_value_size,
            miss_on_oversize: AtomicBool::new(config.miss_on_oversize),
            gets_buffer_too_small: AtomicU64::new(0),
            sets_dropped: AtomicU64::new(0),
            calls_while_disabled: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            sets: AtomicU64::new(0),
            persister,
        })
    }

    /// Stores a copy of `value` for `key`, best effort; the newest value wins.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        if DRIVER_CACHE_DISABLED.load(Ordering::Acquire) {
            self.calls_while_disabled.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.sets.fetch_add(1, Ordering::Relaxed);
        if key.len() > self.max_key_size
            || value.is_empty()
            || value.len() as u64 > self.max_value_size
        {
            self.sets_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.cache.insert(key, value.to_vec()).is_err() {
            self.sets_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The size of the value for `key` (0 on a miss), copied into `buf` only if it fits.
    pub fn get(&self, key: &[u8], buf: &mut [u8]) -> usize {
        if DRIVER_CACHE_DISABLED.load(Ordering::Acquire) {
            self.calls_while_disabled.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let found = if key.len() > self.max_key_size {
            None
        } else {
            self.cache.get(key)
        };
        let Some(value) = found else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        if copy_if_fits(&value, buf) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return value.len();
        }
        self.gets_buffer_too_small.fetch_add(1, Ordering::Relaxed);
        if self.miss_on_oversize.load(Ordering::Relaxed) {
            0
        } else {
            value.len()
        }
    }

    /// Turns [`BlobCacheConfig::miss_on_oversize`] on or off from now on.
    pub fn set_miss_on_oversize(&self, on: bool) {
        self.miss_on_oversize.store(on, Ordering::Relaxed);
    }

    /// Whether a value larger than the caller's buffer is answered with 0.
    pub fn miss_on_oversize(&self) -> bool {
        self.miss_on_oversize.load(Ordering::Relaxed)
    }

    /// Counters.
    pub fn stats(&self) -> BlobCacheStats {
        let c = self.counters();
        BlobCacheStats {
            cache: self.cache.stats(),
            gets_buffer_too_small: c.gets_buffer_too_small,
            sets_dropped: c.sets_dropped,
            calls_while_disabled: c.calls_while_disabled,
            gets: c.gets,
            hits: c.hits,
            misses: c.misses,
            sets: c.sets,
            diagnostics_error: self.persister.as_ref().and_then(Persister::error),
        }
    }

    /// This cache's call counts since it was created.
    pub fn counters(&self) -> BlobCounters {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let (hits, misses) = (load(&self.hits), load(&self.misses));
        let gets_buffer_too_small = load(&self.gets_buffer_too_small);
        // A set is counted before it may be dropped: reading the drops first keeps a
        // snapshot's drops within its sets.
        let sets_dropped = load(&self.sets_dropped);
        BlobCounters {
            // Every get ends as exactly one of these: no separate total on the hot path.
            gets: hits + misses + gets_buffer_too_small,
            hits,
            misses,
            gets_buffer_too_small,
            sets: load(&self.sets),
            sets_dropped,
            calls_while_disabled: load(&self.calls_while_disabled),
        }
    }

    /// Drops every entry, from memory and disk. The directory's diagnostics start afresh
    /// too: the clear removes the file, and what this cache counted before it is not added.
    pub fn clear(&self) {
        match self.cache.clear() {
            Ok(()) => {
                if let Some(persister) = &self.persister {
                    persister.reset_baseline(self.counters());
                }
            }
            Err(e) => tracing::warn!(target: "gpucache", "clearing the blob cache: {e}"),
        }
    }

    /// Writes pending entries to disk (if persisted) and fsyncs them, then adds the counts
    /// since the last update to the directory's diagnostics file. A failure to update the
    /// file is logged and shown in [`BlobCacheStats::diagnostics_error`], never returned:
    /// diagnostics never break the cache.
    pub fn flush(&self) -> Result<()> {
        let result = self.cache.flush();
        let _ = self.persist_stats();
        result
    }

    /// Adds the counts since the last update to the directory's diagnostics file
    /// ([`diagnostics`]); does nothing without a directory or when nothing changed. The
    /// counts of a failed update are added by the next one that succeeds.
    pub fn persist_stats(&self) -> Result<()> {
        match &self.persister {
            Some(persister) => Ok(persister.persist(self.counters(), self.miss_on_oversize())?),
            None => Ok(()),
        }
    }

    /// The memory tier.
    pub fn store(&self) -> &Store {
        self.cache.memory()
    }
}

impl Drop for BlobCache {
    fn drop(&mut self) {
        // Failures are logged by the persister; the entries are flushed by `Cache`'s drop.
        let _ = self.persist_stats();
    }
}

/// The process-global cache behind [`set`] and [`get`].
static GLOBAL: RwLock<Option<Arc<BlobCache>>> = RwLock::new(None);
/// Set by cache control (`IMPLICIT_DRIVER_MANAGED`, `DISABLE`); survives reconfiguration.
static DRIVER_CACHE_DISABLED: AtomicBool = AtomicBool::new(false);

/// Creates the process-global cache, replacing any previous one (whose entries are dropped).
pub fn configure(config: BlobCacheConfig) -> Result<()> {
    let cache = Arc::new(BlobCache::new(config)?);
    *GLOBAL.write() = Some(cache);
    Ok(())
}

/// Drops the process-global cache, persisting pending entries and its diagnostics; later
/// calls of [`set`] are ignored and [`get`] misses.
pub fn shutdown() {
    // Dropped outside the lock: dropping flushes to disk.
    let cache = GLOBAL.write().take();
    drop(cache);
}

/// Persists the process-global cache's pending entries and its diagnostics.
pub fn flush() -> Result<()> {
    global().map_or(Ok(()), |cache| cache.flush())
}

fn global() -> Option<Arc<BlobCache>> {
    GLOBAL.read().clone()
}

/// [`BlobCache::set`] on the process-global cache; ignored when none is configured.
pub fn set(key: &[u8], value: &[u8]) {
    if let Some(cache) = global() {
        cache.set(key, value);
    }
}

/// [`BlobCache::get`] on the process-global cache; 0 when none is configured.
pub fn get(key: &[u8], buf: &mut [u8]) -> usize {
    global().map_or(0, |cache| cache.get(key, buf))
}

/// [`BlobCache::set_miss_on_oversize`] on the process-global cache; `false` when none is
/// configured.
pub fn set_miss_on_oversize(on: bool) -> bool {
    global()
        .map(|cache| cache.set_miss_on_oversize(on))
        .is_some()
}

/// [`BlobCache::miss_on_oversize`] of the process-global cache, if one is configured.
pub fn miss_on_oversize() -> Option<bool> {
    global().map(|cache| cache.miss_on_oversize())
}

/// Counters of the process-global cache, if one is configured.
pub fn stats() -> Option<BlobCacheStats> {
    global().map(|cache| cache.stats())
}

/// Cache control for the driver-managed kind (called by [`crate::cache_control`]).
pub(crate) fn control(control: CacheControl) {
    if control.contains(CacheControl::CLEAR) {
        if let Some(cache) = global() {
            cache.clear();
        }
    }
    if control.contains(CacheControl::DISABLE) {
        DRIVER_CACHE_DISABLED.store(true, Ordering::Release);
    }
    if control.contains(CacheControl::ENABLE) {
        DRIVER_CACHE_DISABLED.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
