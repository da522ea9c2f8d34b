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
//!   `NotCurrentlyAvailable`.
//!
//! Choices where D3D12 is silent: a session's memory cache is one shard, so `CacheFull` is
//! exact; `desc()` returns the session's own description with zero limits replaced by their
//! defaults; opening an identifier that is open in the other mode is `InvalidArgument`.

mod control;
mod desc;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::hash::KeyHasher;
use crate::store::{Lookup, OnExisting, Store, StoreBuilder, WhenFull};
use crate::{Error, PolicyKind, Result, StoreStats};
pub use control::{cache_control, CacheControl, CacheKinds};
pub use desc::{CacheMode, SessionDesc, SessionFlags};

/// Opens a session in the process-wide registry. See [`SessionRegistry::open`].
pub fn open(desc: SessionDesc) -> Result<Session> {
    SessionRegistry::global().open(desc)
}

/// The caches of one process, by identifier.
#[derive(Debug)]
pub struct SessionRegistry {
    inner: Arc<RegistryInner>,
}

#[derive(Debug)]
struct RegistryInner {
    caches: Mutex<HashMap<[u8; 16], Arc<SharedCache>>>,
    disabled: AtomicBool,
    hasher: Option<Arc<dyn KeyHasher>>,
}

/// One cache shared by the sessions of an identifier.
#[derive(Debug)]
struct SharedCache {
    store: Store,
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
    /// An empty registry.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// An empty registry whose caches hash keys with `hasher` (tests inject a weak hasher to
    /// exercise `HashCollision`).
    pub fn with_hasher(hasher: Arc<dyn KeyHasher>) -> Self {
        Self::build(Some(hasher))
    }

    fn build(hasher: Option<Arc<dyn KeyHasher>>) -> Self {
        Self {
            inner: Arc::new(RegistryInner {
                caches: Mutex::new(HashMap::new()),
                disabled: AtomicBool::new(false),
                hasher,
            }),
        }
    }

    /// The process-wide registry.
    pub fn global() -> &'static SessionRegistry {
        static GLOBAL: OnceLock<SessionRegistry> = OnceLock::new();
        GLOBAL.get_or_init(SessionRegistry::new)
    }

    /// Opens a session on the cache named by `desc.identifier`, creating the cache if needed.
    pub fn open(&self, desc: SessionDesc) -> Result<Session> {
        let desc = desc.resolved();
        if self.inner.disabled.load(Ordering::Acquire) {
            return Err(Error::NotCurrentlyAvailable);
        }
        if desc.mode == CacheMode::Disk {
            return Err(Error::Unsupported(
                "disk-mode sessions need the disk tier, which is not built yet",
            ));
        }
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
            store: self.store_for(&desc)?,
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
    /// registry; other kinds are accepted and ignored here (see [`cache_control`]).
    pub fn control(&self, kinds: CacheKinds, control: CacheControl) -> Result<()> {
        control::validate(kinds, control)?;
        if !kinds.contains(CacheKinds::APPLICATION_MANAGED) {
            return Ok(());
        }
        if control.contains(CacheControl::CLEAR) {
            for cache in self.inner.caches.lock().values() {
                cache.store.clear();
            }
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

    fn store_for(&self, desc: &SessionDesc) -> Result<Store> {
        let mut builder = StoreBuilder::new()
            .max_bytes(u64::from(desc.max_in_memory_bytes))
            .max_entries(u64::from(desc.max_in_memory_entries))
            .policy(PolicyKind::Lru)
            .shards(1);
        if let Some(hasher) = &self.inner.hasher {
            builder = builder.hasher(Arc::clone(hasher));
        }
        builder.build()
    }
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
        self.check_enabled()?;
        match self.cache.store.lookup(key) {
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
        let given = buf.len() as u64;
        let dst = buf.get_mut(..value.len()).ok_or(Error::BufferTooSmall {
            needed: value.len() as u64,
            given,
        })?;
        dst.copy_from_slice(&value);
        Ok(value.len())
    }

    /// Stores a new entry. Never replaces; see the module documentation for the errors.
    pub fn store(&self, key: &[u8], value: impl Into<Bytes>) -> Result<()> {
        self.check_enabled()?;
        let when_full = match self.cache.mode {
            CacheMode::Memory => WhenFull::Refuse,
            CacheMode::Disk => WhenFull::Evict,
        };
        let result = self
            .cache
            .store
            .insert_with(key, value.into(), OnExisting::Refuse, when_full);
        match result {
            // In a memory cache a value too large for the whole budget is simply "full".
            Err(Error::ValueTooLarge { size, .. }) if self.cache.mode == CacheMode::Memory => {
                Err(Error::CacheFull {
                    needed: size,
                    available: 0,
                })
            }
            other => other,
        }
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
    pub fn stats(&self) -> StoreStats {
        self.cache.store.stats()
    }

    fn check_enabled(&self) -> Result<()> {
        if self.registry.disabled.load(Ordering::Acquire) {
            Err(Error::NotCurrentlyAvailable)
        } else {
            Ok(())
        }
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
        // Last session: a memory cache has nothing to outlive it; a disk cache is dropped
        // only when asked to (its files go with it once the disk tier exists).
        let delete = self.cache.mode == CacheMode::Memory
            || self.cache.delete_on_destroy.load(Ordering::Acquire);
        if delete {
            self.cache.store.clear();
            let ours = caches
                .get(&self.desc.identifier)
                .is_some_and(|c| Arc::ptr_eq(c, &self.cache));
            if ours {
                caches.remove(&self.desc.identifier);
            }
        }
    }
}

#[cfg(test)]
mod tests;
