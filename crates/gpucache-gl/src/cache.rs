//! The program cache: status storage and binary storage over one engine [`Cache`].
//!
//! Binaries live in the engine's memory tier (the engine's default policy, W-TinyLFU; LRU,
//! the seed's choice, and S3-FIFO selectable), which the disk tier persists: preloaded in the
//! background at open, written behind. A memory miss does the engine's synchronous, checksummed read of the disk tier
//! (the seed's start-up race: the first programs are asked for before the preload reaches
//! them). The engine tells the status storage of every eviction.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpucache::{Cache, CacheStats, MemoryPressure, MetadataStream, PolicyKind};
use parking_lot::Mutex;

use crate::entry::{ProgramEntry, ENTRY_VERSION};
use crate::histograms::{HistogramSet, Metric, PersistedHistograms, Recorder};
use crate::identity::GlIdentity;
use crate::keys::{self, Bindings, ProgramKey, ShaderHash};
use crate::status::{self, Status, StatusStorage};
use crate::{Error, ShaderKind};

/// The cached programs and their shaders (see [`StatusStorage`]).
pub const PROGRAMS_STREAM: MetadataStream = MetadataStream::new("gl-programs", *b"GLPR", 1);
/// The histograms of every run and of the last (see [`PersistedHistograms`]).
pub const HISTOGRAMS_STREAM: MetadataStream = MetadataStream::new("gl-histograms", *b"GLHI", 1);

/// How long a flush waits for the directory's lock (a reader such as `gpucache export` may
/// hold it).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Configures and opens a [`ProgramCache`].
#[derive(Clone, Debug)]
pub struct ProgramCacheBuilder {
    directory: Option<PathBuf>,
    max_memory_bytes: u64,
    max_disk_bytes: u64,
    policy: PolicyKind,
    preload: bool,
}

impl Default for ProgramCacheBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ProgramCacheBuilder {
    /// A builder with the defaults stated on each setter.
    pub fn new() -> Self {
        Self {
            directory: None,
            max_memory_bytes: 64 << 20,
            max_disk_bytes: 256 << 20,
            policy: PolicyKind::default(),
            preload: true,
        }
    }

    /// The cache directory; each identity gets a subdirectory of it. Default: none (memory
    /// only, like the seed's `MemoryProgramCache`).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// Bytes of binaries kept in memory. Default 64 MiB (800 programs of the kodi corpus
    /// take 20 MiB on Mesa llvmpipe; Chromium defaults to 6 MiB of smaller programs).
    pub fn max_memory_bytes(mut self, bytes: u64) -> Self {
        self.max_memory_bytes = bytes;
        self
    }

    /// Bytes of binaries on disk. Default 256 MiB.
    pub fn max_disk_bytes(mut self, bytes: u64) -> Self {
        self.max_disk_bytes = bytes;
        self
    }

    /// Eviction policy of the memory tier. Default: the engine's default,
    /// [`PolicyKind::TinyLfu`] (W-TinyLFU; the seed chose LRU, still selectable).
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.policy = policy;
        self
    }

    /// Whether opening starts reading every stored binary into memory in the background.
    /// Default on.
    pub fn preload(mut self, on: bool) -> Self {
        self.preload = on;
        self
    }

    /// Opens the cache for programs of `identity`. Binaries of another identity in the same
    /// directory are never read (they live in another subdirectory, and every key mixes the
    /// identity in). A directory that cannot be used leaves a memory-only cache (see
    /// [`ProgramCache::disk_error`]).
    pub fn open(self, identity: &GlIdentity) -> Result<ProgramCache, Error> {
        let status = Arc::new(Mutex::new(StatusStorage::new()));
        let listener_status = Arc::clone(&status);
        let mut builder = Cache::builder()
            .identity(identity.to_bytes())
            .version(u64::from(ENTRY_VERSION))
            .driver_versioned(true)
            .max_memory_bytes(self.max_memory_bytes)
            .max_disk_bytes(self.max_disk_bytes)
            .policy(self.policy)
            .preload(self.preload)
            .eviction_listener(Arc::new(move |key: &[u8], _: &gpucache::Bytes| {
                if let Ok(key) = <[u8; 32]>::try_from(key) {
                    listener_status.lock().evict(&ProgramKey(key));
                }
            }));
        if let Some(dir) = &self.directory {
            builder = builder.directory(dir);
        }
        let cache = builder.open()?;
        let this = ProgramCache {
            digest: identity.digest(),
            identity: identity.clone(),
            cache,
            status,
            histograms: Recorder::new(),
        };
        this.load_status();
        tracing::debug!(identity = %keys::describe(identity), "program cache open");
        Ok(this)
    }
}

/// Counters of a [`ProgramCache`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProgramCacheStats {
    /// Programs whose link status is cached.
    pub programs: usize,
    /// Shaders whose compile status is cached.
    pub shaders: usize,
    /// The engine's counters (memory and disk tiers).
    pub cache: CacheStats,
}

/// Status storage and binary storage for the programs of one GL identity. Shared between
/// threads; flushed on drop.
#[derive(Debug)]
pub struct ProgramCache {
    identity: GlIdentity,
    digest: [u8; 32],
    cache: Cache,
    status: Arc<Mutex<StatusStorage>>,
    histograms: Recorder,
}

impl ProgramCache {
    /// A builder with default settings.
    pub fn builder() -> ProgramCacheBuilder {
        ProgramCacheBuilder::new()
    }

    /// The identity the cache was opened for.
    pub fn identity(&self) -> &GlIdentity {
        &self.identity
    }

    /// The hash of a shader of this identity.
    pub fn shader_hash(&self, kind: ShaderKind, source: &str) -> ShaderHash {
        keys::shader_hash(&self.digest, kind, source)
    }

    /// The key of a program of this identity.
    pub fn program_key(
        &self,
        vertex: &ShaderHash,
        fragment: &ShaderHash,
        bindings: &Bindings,
    ) -> ProgramKey {
        keys::program_key(&self.digest, vertex, fragment, bindings)
    }

    /// The compile status of a shader.
    pub fn shader_status(&self, hash: &ShaderHash) -> Status {
        self.status.lock().shader(hash)
    }

    /// Records that a shader compiled.
    pub fn shader_compiled(&self, hash: ShaderHash) {
        self.status.lock().shader_compiled(hash);
    }

    /// The link status of a program: `Success` while its binary is cached in memory (or was
    /// when this process or an earlier one last flushed).
    pub fn program_status(&self, key: &ProgramKey) -> Status {
        self.status.lock().program(key)
    }

    /// The cached program `key`, from memory, or read from disk when memory misses. A stored
    /// value that fails its checks is removed and reported as a miss.
    pub fn load(&self, key: &ProgramKey) -> Option<ProgramEntry> {
        let bytes = self.cache.get(&key.0)?;
        match ProgramEntry::decode(&bytes) {
            Ok(entry) => {
                // Read from disk after an eviction, or preloaded: it is cached again, unless
                // memory's policy refused it at the door (the eviction listener has then
                // already run, so the status is set only for what memory holds).
                if self.cache.in_memory(&key.0) {
                    self.status
                        .lock()
                        .program_linked(*key, entry.vertex, entry.fragment);
                }
                Some(entry)
            }
            Err(e) => {
                tracing::warn!(?key, error = %e, "a stored program fails its checks; removed");
                self.remove(key);
                None
            }
        }
    }

    /// Caches a linked program under `key`, replacing what was there. Returns whether the
    /// cache took it (a binary larger than the memory tier's budget it does not); memory's
    /// policy may still refuse a new program at the door, leaving it on disk only (without a
    /// directory, nowhere), and without a status.
    pub fn store(&self, key: &ProgramKey, entry: &ProgramEntry) -> bool {
        let bytes = entry.encode();
        let before = self.binary_bytes();
        if let Err(e) = self.cache.insert(&key.0, bytes) {
            tracing::debug!(?key, error = %e, "program not cached");
            return false;
        }
        // Stored, in memory unless its policy refused the newcomer at the door (then on disk
        // only, and without a status, as after an eviction).
        if self.cache.in_memory(&key.0) {
            self.status
                .lock()
                .program_linked(*key, entry.vertex, entry.fragment);
        }
        let h = &self.histograms;
        h.record(Metric::BinarySize, entry.binary.data.len() as u64);
        h.record(Metric::CacheSizeBefore, before);
        h.record(Metric::CacheSizeAfter, self.binary_bytes());
        true
    }

    /// Removes a program from memory and disk, and its status.
    pub fn remove(&self, key: &ProgramKey) -> bool {
        let removed = self.cache.remove(&key.0);
        self.status.lock().evict(key) || removed
    }

    /// Removes every program and every status, in memory and on disk.
    pub fn clear(&self) -> Result<(), Error> {
        self.cache.clear()?;
        self.status.lock().clear();
        Ok(())
    }

    /// Gives memory back (evicted programs stay on disk).
    pub fn trim(&self, pressure: MemoryPressure) {
        self.cache.trim(pressure);
    }

    /// Waits until the preload has read every stored binary.
    pub fn wait_for_preload(&self) {
        self.cache.wait_for_preload();
    }

    /// Writes what is queued to disk, and merges the program table and the histograms into
    /// the directory's metadata streams.
    pub fn flush(&self) -> Result<(), Error> {
        self.cache.flush()?;
        let Some(dir) = self.cache.directory() else {
            return Ok(());
        };
        let changes = self.status.lock().take_changes();
        if !changes.is_empty() {
            let written =
                PROGRAMS_STREAM.update(dir, self.cache.identity(), LOCK_WAIT, |current| {
                    changes.apply(current.as_deref())
                });
            if let Err(e) = written {
                self.status.lock().restore_changes(changes);
                return Err(e.into());
            }
        }
        let pending = self.histograms.take_pending();
        if !pending.is_empty() {
            let written =
                HISTOGRAMS_STREAM.update(dir, self.cache.identity(), LOCK_WAIT, |current| {
                    self.histograms.merged(current.as_deref(), &pending)
                });
            if let Err(e) = written {
                self.histograms.restore(&pending);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// The histograms of this process.
    pub fn histograms(&self) -> HistogramSet {
        self.histograms.run()
    }

    /// The histograms stored in the cache directory (every run's, and the last run's), as of
    /// the last flush of any process. `None` without a directory or before any flush.
    pub fn persisted_histograms(&self) -> Result<Option<PersistedHistograms>, Error> {
        let Some(dir) = self.cache.directory() else {
            return Ok(None);
        };
        match HISTOGRAMS_STREAM.read(dir)? {
            None => Ok(None),
            Some(body) => Ok(Some(PersistedHistograms::decode(&body)?)),
        }
    }

    /// Counters.
    pub fn stats(&self) -> ProgramCacheStats {
        let status = self.status.lock();
        ProgramCacheStats {
            programs: status.programs(),
            shaders: status.shaders(),
            cache: self.cache.stats(),
        }
    }

    /// Why the cache is memory-only, if it is.
    pub fn disk_error(&self) -> Option<&str> {
        self.cache.disk_error()
    }

    /// The engine cache the binaries live in.
    pub fn engine(&self) -> &Cache {
        &self.cache
    }

    pub(crate) fn record(&self, metric: Metric, time: Duration) {
        self.histograms.record_time(metric, time);
    }

    /// Bytes of binaries in memory (keys, values and the tier's per-entry overhead).
    fn binary_bytes(&self) -> u64 {
        self.cache.memory().stats().bytes
    }

    /// Reads the persisted program table into the status storage.
    fn load_status(&self) {
        let Some(dir) = self.cache.directory() else {
            return;
        };
        match PROGRAMS_STREAM.read(dir) {
            Ok(Some(body)) => match status::decode_programs(&body) {
                Ok(table) => self.status.lock().load(&table),
                Err(e) => tracing::warn!(error = %e, "the program table is damaged; ignored"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the program table cannot be read; ignored"),
        }
    }
}

impl Drop for ProgramCache {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "flushing the program cache at close");
        }
    }
}
