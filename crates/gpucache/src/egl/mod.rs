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
//! A cache with a directory keeps its counters there too, in the `blob-cache-stats`
//! metadata stream ([`diagnostics`]), updated on [`BlobCache::flush`] and when the cache is
//! dropped, so that `gpucache stats DIR` can show an integrator how the driver's calls went.
//!
//! Cache control disables, enables and clears the process-global cache as the
//! `IMPLICIT_DRIVER_MANAGED` kind ([`crate::cache_control`]).
//!
//! This module is a front end: it uses the engine's public API only.

pub mod diagnostics;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::control::{self, CacheKinds, ControlTarget, Presence};
use crate::metrics::Counter;
use crate::{Cache, CacheBuilder, CacheStats, Result};
use diagnostics::Persister;
pub use diagnostics::{read_persisted_stats, BlobCounters, LastProcess, PersistedBlobStats};

/// Settings of a blob cache: the settings of its [`Cache`] and the contract's own; each
/// setter states its default.
///
/// The C library's `gpucache_egl_config` has a field of the same name for each setting.
#[derive(Clone, Debug)]
pub struct BlobCacheConfig {
    cache: CacheBuilder,
    max_key_size: usize,
    miss_on_oversize: bool,
}

impl Default for BlobCacheConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl BlobCacheConfig {
    /// The defaults: a memory-only cache of 64 MiB (`max_memory_bytes`), 1 GiB on disk once
    /// a directory is set (`max_disk_bytes`, Mesa's default limit), values up to 4 MiB
    /// (`max_value_size`), keys up to 4 KiB, miss-on-oversize off, and the disk's preload
    /// started at the first `get` or `set` ([`CacheBuilder::preload_at_first_use`]; the C
    /// library's install starts it as it installs the callbacks): the cache is configured
    /// before the driver creates its first context, which reads the driver's libraries and
    /// its own cache, and on slow storage those reads would queue behind the preload's.
    pub fn new() -> Self {
        Self {
            cache: CacheBuilder::new()
                .max_value_size(4 << 20)
                .preload_at_first_use(true),
            max_key_size: 4 << 10,
            miss_on_oversize: false,
        }
    }

    /// Changes the cache's settings, starting from the blob cache's defaults: its
    /// [`directory`](CacheBuilder::directory) (shared by every process that uses the same
    /// directory and identity; none keeps it in memory only), its
    /// [`identity`](CacheBuilder::identity) (driver vendor, renderer, version: a directory
    /// written for another identity is wiped; drivers put their version in their keys too,
    /// as the extension recommends, so this is a second line of defence), its memory and
    /// disk limits, its largest value and its eviction policy.
    pub fn cache(mut self, f: impl FnOnce(CacheBuilder) -> CacheBuilder) -> Self {
        self.cache = f(self.cache);
        self
    }

    /// Largest key stored; longer keys are dropped by `set` and miss in `get`. Default 4 KiB
    /// (drivers use hashes of 20 to 32 bytes).
    pub fn max_key_size(mut self, bytes: usize) -> Self {
        self.max_key_size = bytes;
        self
    }

    /// Answer 0 (a miss) instead of the size when the value is larger than the caller's
    /// buffer. Default `false`, the extension's behaviour; turn it on for Mesa.
    pub fn miss_on_oversize(mut self, on: bool) -> Self {
        self.miss_on_oversize = on;
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

/// Call counts of a blob cache.
#[derive(Debug, Default)]
struct Calls {
    gets_buffer_too_small: Counter,
    sets_dropped: Counter,
    calls_while_disabled: Counter,
    hits: Counter,
    misses: Counter,
    sets: Counter,
}

/// A cache with the blob-cache `set`/`get` semantics. The free functions of this module use a
/// process-global one; this type is for embedding and tests.
#[derive(Debug)]
pub struct BlobCache {
    cache: Cache,
    max_key_size: usize,
    /// Changed at run time by an install helper that recognises the driver.
    miss_on_oversize: AtomicBool,
    calls: Calls,
    /// Keeps the directory's diagnostics stream; `None` without a usable directory.
    persister: Option<Persister>,
}

impl BlobCache {
    /// A cache with the given settings.
    pub fn new(config: BlobCacheConfig) -> Result<Self> {
        let cache = config.cache.open()?;
        let persister = cache
            .directory()
            .map(|dir| Persister::new(dir.to_path_buf(), cache.identity().clone()));
        Ok(Self {
            cache,
            max_key_size: config.max_key_size,
            miss_on_oversize: AtomicBool::new(config.miss_on_oversize),
            calls: Calls::default(),
            persister,
        })
    }

    /// Stores a copy of `value` for `key`, best effort; the newest value wins.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        if control::is_disabled(CacheKinds::IMPLICIT_DRIVER_MANAGED) {
            self.calls.calls_while_disabled.incr();
            return;
        }
        self.calls.sets.incr();
        let stored = key.len() <= self.max_key_size
            && !value.is_empty()
            && value.len() as u64 <= self.max_value_size()
            && copy(value).is_some_and(|value| self.cache.insert(key, value).is_ok());
        if !stored {
            self.calls.sets_dropped.incr();
        }
    }

    /// Counts a `set` refused from its sizes alone, before its bytes were read: a C caller's
    /// key or value larger than [`max_key_size`](Self::max_key_size) or
    /// [`max_value_size`](Self::max_value_size) (up to `LONG_MAX` bytes declared).
    pub fn set_refused(&self) {
        if control::is_disabled(CacheKinds::IMPLICIT_DRIVER_MANAGED) {
            self.calls.calls_while_disabled.incr();
            return;
        }
        self.calls.sets.incr();
        self.calls.sets_dropped.incr();
    }

    /// The largest value `set` stores: [`CacheBuilder::max_value_size`] (4 MiB by default),
    /// or less when the cache's disk segments are smaller ([`Cache::max_value_size`]).
    pub fn max_value_size(&self) -> u64 {
        self.cache.max_value_size()
    }

    /// The longest key `set` stores and `get` looks up.
    pub fn max_key_size(&self) -> usize {
        self.max_key_size
    }

    /// The size of the value for `key` (0 on a miss), copied into `buf` only if it fits.
    pub fn get(&self, key: &[u8], buf: &mut [u8]) -> usize {
        if control::is_disabled(CacheKinds::IMPLICIT_DRIVER_MANAGED) {
            self.calls.calls_while_disabled.incr();
            return 0;
        }
        let found = if key.len() > self.max_key_size {
            None
        } else {
            self.cache.get(key)
        };
        let Some(value) = found else {
            self.calls.misses.incr();
            return 0;
        };
        if let Some(dst) = buf.get_mut(..value.len()) {
            dst.copy_from_slice(&value);
            self.calls.hits.incr();
            return value.len();
        }
        self.calls.gets_buffer_too_small.incr();
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
        let c = &self.calls;
        let (hits, misses) = (c.hits.get(), c.misses.get());
        let gets_buffer_too_small = c.gets_buffer_too_small.get();
        // A set is counted before it may be dropped: reading the drops first keeps a
        // snapshot's drops within its sets.
        let sets_dropped = c.sets_dropped.get();
        BlobCounters {
            // Every get ends as exactly one of these: no separate total on the hot path.
            gets: hits + misses + gets_buffer_too_small,
            hits,
            misses,
            gets_buffer_too_small,
            sets: c.sets.get(),
            sets_dropped,
            calls_while_disabled: c.calls_while_disabled.get(),
        }
    }

    /// Drops every entry, from memory and disk. The directory's diagnostics start afresh
    /// too: the clear removes the stream, and what this cache counted before it is not added.
    pub fn clear(&self) -> Result<()> {
        self.cache.clear()?;
        if let Some(persister) = &self.persister {
            persister.reset_baseline(self.counters());
        }
        Ok(())
    }

    /// Writes pending entries to disk (if persisted) and fsyncs them, then adds the counts
    /// since the last update to the directory's diagnostics stream. A failure to update the
    /// stream is logged and shown in [`BlobCacheStats::diagnostics_error`], never returned:
    /// diagnostics never break the cache.
    pub fn flush(&self) -> Result<()> {
        let result = self.cache.flush();
        let _ = self.persist_stats();
        result
    }

    /// Adds the counts since the last update to the directory's diagnostics stream
    /// ([`diagnostics`]); does nothing without a directory or when nothing changed. The
    /// counts of a failed update are added by the next one that succeeds.
    pub fn persist_stats(&self) -> Result<()> {
        match &self.persister {
            Some(persister) => persister.persist(self.counters(), self.miss_on_oversize()),
            None => Ok(()),
        }
    }

    /// The cache it stores into.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }
}

impl Drop for BlobCache {
    fn drop(&mut self) {
        // Failures are logged by the persister; the entries are flushed by `Cache`'s drop.
        let _ = self.persist_stats();
    }
}

/// A copy of `value`, or `None` when the memory for it cannot be had (a driver's `set` must
/// not abort the process).
fn copy(value: &[u8]) -> Option<Vec<u8>> {
    let mut copy = Vec::new();
    copy.try_reserve_exact(value.len()).ok()?;
    copy.extend_from_slice(value);
    Some(copy)
}

/// The process-global cache behind [`set`] and [`get`].
static GLOBAL: RwLock<Option<Arc<BlobCache>>> = RwLock::new(None);

/// What cache control clears for the driver-managed kind: the process-global cache.
struct GlobalTarget;

impl ControlTarget for GlobalTarget {
    fn clear(&self) -> Result<()> {
        global().map_or(Ok(()), |cache| cache.clear())
    }

    fn presence(&self) -> Presence {
        match global() {
            None => Presence::Absent,
            Some(cache) if cache.cache.directory().is_some() => Presence::Disk,
            Some(_) => Presence::Memory,
        }
    }
}

/// Creates the process-global cache, replacing any previous one (whose entries are dropped).
/// Cache control of `IMPLICIT_DRIVER_MANAGED` caches applies to it from then on.
pub fn configure(config: BlobCacheConfig) -> Result<()> {
    static TARGET: OnceLock<Arc<dyn ControlTarget>> = OnceLock::new();
    TARGET.get_or_init(|| {
        let target: Arc<dyn ControlTarget> = Arc::new(GlobalTarget);
        control::register(CacheKinds::IMPLICIT_DRIVER_MANAGED, &target);
        target
    });
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

/// [`shutdown`] for an exit handler: persists the same way, and leaves the cache's values
/// in memory to the end of the process instead of freeing them
/// ([`Cache::leave_memory_to_exit`]). Only for a process that is exiting.
pub fn shutdown_at_exit() {
    let cache = GLOBAL.write().take();
    if let Some(cache) = &cache {
        cache.cache.leave_memory_to_exit();
    }
    // Dropped outside the lock: dropping flushes to disk.
    drop(cache);
}

/// Persists the process-global cache's pending entries and its diagnostics.
pub fn flush() -> Result<()> {
    global().map_or(Ok(()), |cache| cache.flush())
}

fn global() -> Option<Arc<BlobCache>> {
    GLOBAL.read().clone()
}

/// The process-global cache, if one is configured (for a caller that checks sizes against
/// its limits before handing over bytes, as the C library does).
pub fn current() -> Option<Arc<BlobCache>> {
    global()
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

#[cfg(test)]
mod tests;
