//! D3D12-style cache sessions (`ID3D12ShaderCacheSession`).
//!
//! A [`SessionRegistry`] maps identifiers to caches; sessions opened with the same identifier
//! share one cache. The process-wide registry is [`SessionRegistry::global`]; tests and
//! embedders may make their own.
//!
//! Semantics, following the D3D12 specification:
//! - `store` never replaces: an equal key is `AlreadyExists`, an equal hash with another key
//!   is `HashCollision`, and an entry that does not fit in a memory cache is `CacheFull` (a
//!   memory cache does not evict: it is the only copy).
//! - `find` is `NotFound` for a missing key and `HashCollision` when another key with the same
//!   hash is stored.
//! - Opening with another version wipes the cache when no session has it open, and fails with
//!   `AlreadyExists` when one does.
//! - A memory cache is dropped when its last session closes; `set_delete_on_destroy` does the
//!   same for a disk cache.
//! - While `APPLICATION_MANAGED` caches are disabled, opening, finding and storing fail with
//!   `NotCurrentlyAvailable`. The process-wide registry obeys [`crate::cache_control`] (it
//!   registers itself for the `APPLICATION_MANAGED` kind when first used); a registry of
//!   one's own obeys its [`SessionRegistry::control`]. Both answer `DeveloperModeRequired`
//!   outside developer mode ([`crate::developer_mode`]), as D3D12 allows cache control only
//!   there. [`shader_cache_support`] is the seed's support query.
//!
//! - A disk cache lives in its own directory under the registry's root
//!   (`ROOT/d3d12/<identifier in hex>`), or with `USE_WORKING_DIR` in
//!   `./<identifier in hex>.gpucache`; with `DRIVER_VERSIONED`, one subdirectory per driver
//!   identity. Its memory tier holds `max_in_memory_*` and evicts; the directory is bounded by
//!   `max_value_file_bytes`, past which `store` is `CacheFull`.
//!
//! Choices where D3D12 is silent: a session's memory tier is one shard, so `CacheFull` is
//! exact; `desc()` returns the session's own description with zero limits replaced by their
//! defaults; opening an identifier that is open in the other mode is `InvalidArgument`; when
//! the last session of a disk cache closes, pending writes are flushed and the cache closed.
//!
//! This module is a front end: it uses the engine's public API only.

mod desc;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::control::{self, CacheControl, CacheKinds, ControlTarget};
use crate::{
    Cache, CacheBuilder, CacheStats, Error, InsertMode, KeyHasher, Lookup, PolicyKind, Result,
};
pub use desc::{CacheMode, SessionDesc, SessionFlags};

/// Opens a session in the process-wide registry. See [`SessionRegistry::open`].
pub fn open(desc: SessionDesc) -> Result<Session> {
    SessionRegistry::global().open(desc)
}

/// The support query of the seed (`CheckFeatureSupport(D3D12_FEATURE_SHADER_CACHE)`): see
/// [`crate::shader_cache_support`].
pub fn shader_cache_support() -> crate::ShaderCacheSupport {
    control::shader_cache_support()
}

/// The caches of one process, by identifier.
#[derive(Debug)]
pub struct SessionRegistry {
    inner: Arc<RegistryInner>,
}

#[derive(Debug)]
struct RegistryInner {
    caches: Mutex<HashMap<[u8; 16], Arc<SharedCache>>>,
    /// Disabled by [`SessionRegistry::control`]; the process-wide registry also obeys the
    /// engine's cache control.
    disabled: AtomicBool,
    global: bool,
    hasher: Option<Arc<dyn KeyHasher>>,
    /// Where disk caches live (those without `USE_WORKING_DIR`).
    root: PathBuf,
    /// What `DRIVER_VERSIONED` caches are versioned by.
    driver_identity: Vec<u8>,
}

/// One cache shared by the sessions of an identifier.
#[derive(Debug)]
struct SharedCache {
    cache: Cache,
    mode: CacheMode,
    version: u64,
    /// Sessions open on this cache; changed only under the registry lock.
    open_sessions: Mutex<usize>,
    delete_on_destroy: AtomicBool,
}

impl Default for SessionRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionRegistry {
    /// An empty registry keeping disk caches under [`default_root`].
    pub fn new() -> Self {
        Self::build(None, default_root())
    }

    /// An empty registry keeping disk caches under `root`.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Self::build(None, root.into())
    }

    /// An empty registry whose caches hash keys with `hasher` (tests inject a weak hasher to
    /// exercise `HashCollision`).
    pub fn with_hasher(hasher: Arc<dyn KeyHasher>) -> Self {
        Self::build(Some(hasher), default_root())
    }

    fn build(hasher: Option<Arc<dyn KeyHasher>>, root: PathBuf) -> Self {
        Self {
            inner: Arc::new(RegistryInner {
                caches: Mutex::new(HashMap::new()),
                disabled: AtomicBool::new(false),
                global: false,
                hasher,
                root,
                driver_identity: format!("gpucache {}", env!("CARGO_PKG_VERSION")).into_bytes(),
            }),
        }
    }

    /// Sets what `DRIVER_VERSIONED` caches are versioned by (the GPU driver's vendor,
    /// renderer and version). Default: gpucache's own name and version.
    pub fn driver_identity(mut self, identity: impl Into<Vec<u8>>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.driver_identity = identity.into();
        }
        self
    }

    /// The process-wide registry. The first call registers it with the engine's cache
    /// control, for the `APPLICATION_MANAGED` kind.
    pub fn global() -> &'static SessionRegistry {
        static GLOBAL: OnceLock<(SessionRegistry, Arc<dyn ControlTarget>)> = OnceLock::new();
        let (registry, _) = GLOBAL.get_or_init(|| {
            let mut registry = SessionRegistry::new();
            Arc::get_mut(&mut registry.inner)
                .expect("not shared yet")
                .global = true;
            let target: Arc<dyn ControlTarget> = Arc::new(ClearTarget(Arc::clone(&registry.inner)));
            control::register(CacheKinds::APPLICATION_MANAGED, &target);
            (registry, target)
        });
        registry
    }

    /// Opens a session on the cache named by `desc.identifier`, creating the cache if needed.
    pub fn open(&self, desc: SessionDesc) -> Result<Session> {
        let desc = desc.resolved();
        self.inner.check_enabled()?;
        let mut caches = self.inner.caches.lock();
        if let Some(cache) = caches.get(&desc.identifier) {
            let mut open = cache.open_sessions.lock();
            if cache.mode != desc.mode {
                return Err(Error::InvalidArgument(format!(
                    "cache is already open in {:?} mode",
                    cache.mode
                )));
            }
            if cache.version == desc.version {
                *open += 1;
                return Ok(Session {
                    cache: Arc::clone(cache),
                    registry: Arc::clone(&self.inner),
                    desc,
                });
            }
            if *open > 0 {
                return Err(Error::AlreadyExists(
                    "cache is open with another version in this process",
                ));
            }
            // Version mismatch and nobody has it open: wipe and re-create below.
            drop(open);
            caches.remove(&desc.identifier);
        }
        let cache = Arc::new(SharedCache {
            cache: self.cache_for(&desc)?,
            mode: desc.mode,
            version: desc.version,
            open_sessions: Mutex::new(1),
            delete_on_destroy: AtomicBool::new(false),
        });
        caches.insert(desc.identifier, Arc::clone(&cache));
        Ok(Session {
            cache,
            registry: Arc::clone(&self.inner),
            desc,
        })
    }

    /// Applies cache control to this registry's caches. Only `APPLICATION_MANAGED` concerns a
    /// registry; other kinds are accepted and ignored here. For the process-wide registry
    /// this is [`crate::cache_control`] of `APPLICATION_MANAGED`. Like it, allowed only in
    /// [`crate::developer_mode`] (a registry of one's own may share the default root), else
    /// [`Error::DeveloperModeRequired`].
    pub fn control(&self, kinds: CacheKinds, control: CacheControl) -> Result<()> {
        control.check(kinds)?;
        if !control::developer_mode() {
            return Err(Error::DeveloperModeRequired);
        }
        if !kinds.contains(CacheKinds::APPLICATION_MANAGED) {
            return Ok(());
        }
        if self.inner.global {
            return control::cache_control(CacheKinds::APPLICATION_MANAGED, control);
        }
        if control.contains(CacheControl::CLEAR) {
            self.inner.clear()?;
        }
        if control.contains(CacheControl::DISABLE) {
            self.inner.disabled.store(true, Ordering::Release);
        }
        if control.contains(CacheControl::ENABLE) {
            self.inner.disabled.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Number of caches with at least one open session.
    pub fn open_caches(&self) -> usize {
        self.inner.caches.lock().len()
    }

    fn disk_dir(&self, identifier: &[u8; 16]) -> PathBuf {
        self.inner.disk_dir(identifier)
    }

    fn cache_for(&self, desc: &SessionDesc) -> Result<Cache> {
        let mut builder = CacheBuilder::new()
            .max_memory_bytes(u64::from(desc.max_in_memory_bytes))
            .max_memory_entries(u64::from(desc.max_in_memory_entries))
            .policy(PolicyKind::Lru)
            .shards(1);
        if let Some(hasher) = &self.inner.hasher {
            builder = builder.hasher(Arc::clone(hasher));
        }
        if desc.mode == CacheMode::Disk {
            let dir = if desc.flags.contains(SessionFlags::USE_WORKING_DIR) {
                std::env::current_dir()?.join(format!("{}.gpucache", hex(&desc.identifier)))
            } else {
                self.disk_dir(&desc.identifier)
            };
            builder = builder
                .directory(dir)
                .version(desc.version)
                .max_disk_bytes(u64::from(desc.max_value_file_bytes).max(64 << 10));
            if desc.flags.contains(SessionFlags::DRIVER_VERSIONED) {
                builder = builder
                    .driver_versioned(true)
                    .identity(self.inner.driver_identity.clone());
            }
        }
        builder.open()
    }
}

impl RegistryInner {
    fn disk_dir(&self, identifier: &[u8; 16]) -> PathBuf {
        self.root.join("d3d12").join(hex(identifier))
    }

    fn check_enabled(&self) -> Result<()> {
        let disabled = self.disabled.load(Ordering::Acquire)
            || (self.global && control::is_disabled(CacheKinds::APPLICATION_MANAGED));
        if disabled {
            Err(Error::NotCurrentlyAvailable)
        } else {
            Ok(())
        }
    }

    /// Clears the open caches, and removes the disk caches not open now (except those in
    /// working directories).
    fn clear(&self) -> Result<()> {
        let caches = self.caches.lock();
        for cache in caches.values() {
            cache.cache.clear()?;
        }
        let open: Vec<PathBuf> = caches.keys().map(|id| self.disk_dir(id)).collect();
        if let Ok(entries) = std::fs::read_dir(self.root.join("d3d12")) {
            for entry in entries.flatten() {
                if !open.contains(&entry.path()) {
                    std::fs::remove_dir_all(entry.path())?;
                }
            }
        }
        Ok(())
    }
}

/// What the engine's cache control clears for the process-wide registry.
struct ClearTarget(Arc<RegistryInner>);

impl ControlTarget for ClearTarget {
    fn clear(&self) -> Result<()> {
        self.0.clear()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where disk caches live by default: `$GPUCACHE_DIR`, else `$XDG_CACHE_HOME/gpucache`, else
/// `~/.cache/gpucache`, else the temporary directory's `gpucache`.
pub fn default_root() -> PathBuf {
    let env = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("GPUCACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("gpucache")))
        .or_else(|| env("HOME").map(|p| p.join(".cache").join("gpucache")))
        .unwrap_or_else(|| std::env::temp_dir().join("gpucache"))
}

/// An open session on a shared cache. Closing (dropping) the last session of a memory cache
/// drops its entries.
#[derive(Debug)]
pub struct Session {
    cache: Arc<SharedCache>,
    registry: Arc<RegistryInner>,
    desc: SessionDesc,
}

impl Session {
    /// The value stored for `key`, without copying.
    pub fn find(&self, key: &[u8]) -> Result<Bytes> {
        self.registry.check_enabled()?;
        match self.cache.cache.lookup(key) {
            Lookup::Hit(value) => Ok(value),
            Lookup::Miss => Err(Error::NotFound),
            Lookup::Collision => Err(Error::HashCollision),
        }
    }

    /// The size of the value stored for `key` (the first of D3D12's two `FindValue` calls).
    pub fn find_size(&self, key: &[u8]) -> Result<usize> {
        self.find(key).map(|value| value.len())
    }

    /// Copies the value for `key` into the front of `buf` and returns its size. A buffer
    /// smaller than the value gets [`Error::BufferTooSmall`] and is not written.
    pub fn find_into(&self, key: &[u8], buf: &mut [u8]) -> Result<usize> {
        let value = self.find(key)?;
        let Some(dst) = buf.get_mut(..value.len()) else {
            return Err(Error::BufferTooSmall {
                needed: value.len() as u64,
                given: buf.len() as u64,
            });
        };
        dst.copy_from_slice(&value);
        Ok(value.len())
    }

    /// Stores a new entry. Never replaces; see the module documentation for the errors.
    pub fn store(&self, key: &[u8], value: impl Into<Bytes>) -> Result<()> {
        self.registry.check_enabled()?;
        let value = value.into();
        let size = value.len() as u64;
        match self
            .cache
            .cache
            .insert_with(key, value, InsertMode::NEW_ONLY)
        {
            // D3D12 has no "too large": a value over the limit does not fit, so it is "full".
            Err(Error::ValueTooLarge { .. }) => Err(Error::CacheFull {
                needed: size,
                available: 0,
            }),
            other => other,
        }
    }

    /// The largest value [`store`](Self::store) accepts; a larger one is `CacheFull`. A
    /// memory cache: what fits in `max_in_memory_bytes` with one entry's overhead
    /// ([`crate::ENTRY_OVERHEAD`]) and its key. A disk cache: what one segment of its
    /// files holds (an eighth of `max_value_file_bytes`, at least 64 KiB in all, less
    /// record headers and the key). A value under the limit is still `CacheFull` when the
    /// cache has no room left for it.
    pub fn max_value_size(&self) -> u64 {
        self.cache.cache.max_value_size()
    }

    /// Writes pending stores of a disk cache to its files.
    pub fn flush(&self) -> Result<()> {
        self.cache.cache.flush()
    }

    /// Clears the cache once every session on it has closed.
    pub fn set_delete_on_destroy(&self) {
        self.cache.delete_on_destroy.store(true, Ordering::Release);
    }

    /// The description this session was opened with, zero limits resolved to defaults.
    pub fn desc(&self) -> &SessionDesc {
        &self.desc
    }

    /// Counters of the shared cache.
    pub fn stats(&self) -> CacheStats {
        self.cache.cache.stats()
    }

    /// The directory of a disk cache.
    pub fn directory(&self) -> Option<&Path> {
        self.cache.cache.directory()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let mut caches = self.registry.caches.lock();
        let mut open = self.cache.open_sessions.lock();
        *open -= 1;
        if *open > 0 {
            return;
        }
        // Last session: the cache closes (a disk cache flushes on drop) and, if asked, its
        // contents and files go with it.
        if self.cache.delete_on_destroy.load(Ordering::Acquire) {
            if let Err(e) = self.cache.cache.delete_files() {
                tracing::warn!(target: "gpucache", "delete-on-destroy failed: {e}");
            }
        }
        let ours = caches
            .get(&self.desc.identifier)
            .is_some_and(|c| Arc::ptr_eq(c, &self.cache));
        if ours {
            caches.remove(&self.desc.identifier);
        }
    }
}

#[cfg(test)]
mod tests;
