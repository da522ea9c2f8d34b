//! The memory tier: a thread-safe, bounded key/value blob store.
//!
//! Keys and values are arbitrary bytes. The store is split into shards, each a mutex around
//! an index, its slots and an eviction policy; a key's hash picks its shard. Budgets are
//! divided evenly between shards, so the sum of the shards' charges never exceeds the
//! configured totals. A shard is built at its first use: a cache opened to serve a few
//! hits builds only the shards they reach (building all eight of a 2-CPU machine cost the
//! first hit about 1 µs).

mod key;
mod shard;
mod stats;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::{RwLock, RwLockWriteGuard};

use crate::hash::{KeyHasher, Xxh3KeyHasher};
use crate::metrics::HitMissCounters;
use crate::policy::PolicyKind;
use crate::{Error, InsertMode, Lookup, Result};
pub use shard::ENTRY_OVERHEAD;
use shard::{Found, Shard};
pub use stats::StoreStats;

/// How hard the process is pressed for memory (Chromium's memory-pressure levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryPressure {
    /// Trim to a quarter of the byte budget.
    Moderate,
    /// Drop everything.
    Critical,
}

/// Told of every entry the memory tier evicts to make room or to give memory back
/// ([`Store::trim`]), including a newcomer W-TinyLFU refused at the door (see
/// [`Store::insert`]); not of entries removed, replaced or cleared by the caller.
///
/// It is called after the shard's lock is released, on the thread that caused the eviction,
/// so it may use the store. With lower tiers under the memory tier the entry stays in them.
/// A closure `Fn(&[u8], &Bytes) + Send + Sync` is a listener.
pub trait EvictionListener: Send + Sync + 'static {
    /// `key` was evicted; `value` was its value.
    fn on_evict(&self, key: &[u8], value: &Bytes);
}

impl<F: Fn(&[u8], &Bytes) + Send + Sync + 'static> EvictionListener for F {
    fn on_evict(&self, key: &[u8], value: &Bytes) {
        self(key, value)
    }
}

/// Configures and builds a [`Store`].
#[derive(Clone)]
pub struct StoreBuilder {
    max_bytes: u64,
    max_entries: u64,
    max_value_size: Option<u64>,
    policy: PolicyKind,
    shards: Option<usize>,
    hasher: Option<Arc<dyn KeyHasher>>,
    listener: Option<Arc<dyn EvictionListener>>,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("max_bytes", &self.max_bytes)
            .field("max_entries", &self.max_entries)
            .field("max_value_size", &self.max_value_size)
            .field("policy", &self.policy)
            .field("shards", &self.shards)
            .field("listener", &self.listener.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for StoreBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StoreBuilder {
    /// A builder with the defaults stated on each setter.
    pub fn new() -> Self {
        Self {
            max_bytes: 64 << 20,
            max_entries: u64::MAX,
            max_value_size: None,
            policy: PolicyKind::default(),
            shards: None,
            hasher: None,
            listener: None,
        }
    }

    /// Total bytes charged (key + value + [`ENTRY_OVERHEAD`] per entry). Default 64 MiB.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Total entries. Default: unbounded (only bytes bound the store).
    pub fn max_entries(mut self, entries: u64) -> Self {
        self.max_entries = entries;
        self
    }

    /// Largest value accepted; a larger one is refused with [`Error::ValueTooLarge`] and the
    /// previous value of its key is kept. Default: whatever fits in one shard's byte budget.
    pub fn max_value_size(mut self, bytes: u64) -> Self {
        self.max_value_size = Some(bytes);
        self
    }

    /// Eviction policy. Default [`PolicyKind::TinyLfu`].
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.policy = policy;
        self
    }

    /// Number of shards, rounded up to a power of two. Default: automatic, 4 per CPU up to
    /// 64, fewer for small budgets so that each shard keeps at least 1 MiB and 64 entries
    /// (a D3D12 session with its default budget of 1 KiB and 128 entries has one shard).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Key hasher. Default [`Xxh3KeyHasher`] with a random seed.
    pub fn hasher(mut self, hasher: Arc<dyn KeyHasher>) -> Self {
        self.hasher = Some(hasher);
        self
    }

    /// Told of every eviction (see [`EvictionListener`]). Default: none.
    pub fn eviction_listener(mut self, listener: Arc<dyn EvictionListener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Builds the store.
    pub fn build(self) -> Result<Store> {
        if self.shards == Some(0) {
            return Err(Error::InvalidArgument("shards must be at least 1".into()));
        }
        let shard_count = self
            .shards
            .unwrap_or_else(|| auto_shards(self.max_bytes, self.max_entries))
            .clamp(1, 1 << 16)
            .next_power_of_two();
        let n = shard_count as u64;
        let shard_bytes = self.max_bytes / n;
        let shard_entries = self.max_entries / n;
        let max_value_size = self
            .max_value_size
            .unwrap_or(u64::MAX)
            .min(shard_bytes.saturating_sub(ENTRY_OVERHEAD));
        let shards = (0..shard_count).map(|_| OnceLock::new()).collect();
        Ok(Store {
            shards,
            shard_bytes,
            shard_entries,
            shard_shift: 64 - shard_count.trailing_zeros(),
            hasher: match self.hasher {
                Some(custom) => StoreHasher::Custom(custom),
                None => StoreHasher::Xxh3(Xxh3KeyHasher::new()),
            },
            shared_touch: self.policy.records_hits_shared(),
            lookups: HitMissCounters::default(),
            max_value_size,
            policy: self.policy,
            listener: self.listener,
        })
    }
}

fn auto_shards(max_bytes: u64, max_entries: u64) -> usize {
    let cpus = cpu_count();
    let mut shards = (cpus * 4).min(64).next_power_of_two() as u64;
    while shards > 1 && (max_bytes / shards < (1 << 20) || max_entries / shards < 64) {
        shards /= 2;
    }
    shards as usize
}

/// The CPUs this thread may run on: one `sched_getaffinity` call. Not
/// `std::thread::available_parallelism`, which also reads the cgroup's CPU quota files (8 read
/// calls, about 0.1 ms, on every call: half of what opening a cache cost). A quota limits CPU
/// time, not which CPUs run at once, so the affinity mask is also the truer count of threads
/// that may contend for a shard.
fn cpu_count() -> usize {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) if set.count() > 0 => set.count() as usize,
        // More CPUs than the set holds, or no such call: std's count.
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// A thread-safe, bounded key/value blob store (the memory tier).
///
/// ```
/// let store = gpucache::StoreBuilder::new().max_bytes(1 << 20).build().unwrap();
/// store.insert(b"key", b"value".to_vec()).unwrap();
/// assert_eq!(store.get(b"key").as_deref(), Some(&b"value"[..]));
/// ```
pub struct Store {
    /// Each built at its first use ([`Store::shard`]).
    shards: Box<[OnceLock<RwLock<Shard>>]>,
    /// Each shard's budgets.
    shard_bytes: u64,
    shard_entries: u64,
    /// `64 - log2(shards)`: the shard is the top bits of the mixed hash.
    shard_shift: u32,
    hasher: StoreHasher,
    /// Whether the policy records hits under a read lock (S3-FIFO, W-TinyLFU); if not
    /// (LRU), lookups take the write lock.
    shared_touch: bool,
    /// Lookup counters live outside the shards so that lookups write no shard state.
    lookups: HitMissCounters,
    max_value_size: u64,
    policy: PolicyKind,
    listener: Option<Arc<dyn EvictionListener>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.shards.len())
            .field("policy", &self.policy)
            .field("max_value_size", &self.max_value_size)
            .field("listener", &self.listener.is_some())
            .finish_non_exhaustive()
    }
}

/// The default hasher is called directly (inlined); an injected one through its vtable.
#[derive(Debug)]
enum StoreHasher {
    Xxh3(Xxh3KeyHasher),
    Custom(Arc<dyn KeyHasher>),
}

impl StoreHasher {
    #[inline]
    fn hash_key(&self, key: &[u8]) -> u64 {
        match self {
            StoreHasher::Xxh3(h) => h.hash_key(key),
            StoreHasher::Custom(h) => h.hash_key(key),
        }
    }
}

impl Store {
    /// A builder with default settings.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::new()
    }

    /// The value stored for `key`, without copying it.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.lookup(key).hit()
    }

    /// Copies the value for `key` into `buf` if it fits, C style.
    ///
    /// Returns the value's size if the key is present (whether or not it was copied) and
    /// `None` if it is not. Nothing is written to `buf` unless `buf.len() >= size`.
    pub fn get_into(&self, key: &[u8], buf: &mut [u8]) -> Option<usize> {
        let value = self.get(key)?;
        copy_if_fits(&value, buf);
        Some(value.len())
    }

    /// Whether `key` is present. Counts neither a hit nor a miss and leaves the order alone.
    pub fn contains(&self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_key(key);
        self.shard(hash).read().contains(hash, key)
    }

    /// Stores `value` for `key`; the newest value wins, evicting others as needed.
    ///
    /// With W-TinyLFU (the default policy), a full store decides the newcomer's admission at
    /// the door: a newcomer requested no more often than the residents it would displace is
    /// refused (the call succeeds, nothing is kept, and the refusal counts as an eviction and
    /// reaches the eviction listener), so one-off values do not push out popular ones. LRU and
    /// S3-FIFO keep every newcomer. [`InsertMode::NEW_ONLY`] refuses with an error instead of
    /// evicting at all.
    ///
    /// Fails with [`Error::ValueTooLarge`] (keeping any previous value) when the entry cannot
    /// fit even in an empty shard. A stored key whose hash equals this one's is displaced.
    pub fn insert(&self, key: &[u8], value: impl Into<Bytes>) -> Result<()> {
        self.insert_with(key, value.into(), InsertMode::REPLACE)
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_key(key);
        self.shard(hash).write().remove(hash, key)
    }

    /// Removes every entry. Counters are kept.
    pub fn clear(&self) {
        for shard in self.built_shards() {
            shard.write().clear();
        }
    }

    /// Gives memory back under pressure: [`MemoryPressure::Moderate`] evicts in policy order
    /// down to a quarter of the byte budget, [`MemoryPressure::Critical`] drops everything.
    pub fn trim(&self, pressure: MemoryPressure) {
        for shard in self.built_shards() {
            let mut shard = shard.write();
            let target = match pressure {
                MemoryPressure::Moderate => shard.stats().max_bytes / 4,
                MemoryPressure::Critical => 0,
            };
            shard.evict_to(target);
            self.report_evictions(shard);
        }
    }

    /// Counters summed over the shards (each shard is read under its own lock, so the sum is
    /// not one atomic snapshot while other threads write).
    pub fn stats(&self) -> StoreStats {
        let mut total = StoreStats::default();
        for shard in self.shards.iter() {
            match shard.get() {
                Some(shard) => total.add(&shard.read().stats()),
                // Not built yet: empty, with its share of the budgets.
                None => total.add(&StoreStats {
                    max_bytes: self.shard_bytes,
                    max_entries: self.shard_entries,
                    ..StoreStats::default()
                }),
            }
        }
        (total.hits, total.misses) = self.lookups.get();
        total
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.stats().entries as usize
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest value this store accepts.
    pub fn max_value_size(&self) -> u64 {
        self.max_value_size
    }

    /// The eviction policy in use.
    pub fn policy(&self) -> PolicyKind {
        self.policy
    }

    /// A copy of every entry (order unspecified). Shards are read one at a time.
    pub fn entries(&self) -> Vec<(Bytes, Bytes)> {
        let mut out = Vec::new();
        for shard in self.built_shards() {
            shard
                .read()
                .for_each(&mut |k, v| out.push((Bytes::copy_from_slice(k), v.clone())));
        }
        out
    }

    /// What is stored for `key`: its value, nothing, or another key with the same hash.
    pub fn lookup(&self, key: &[u8]) -> Lookup {
        let hash = self.hasher.hash_key(key);
        let lock = self.shard(hash);
        let found = if self.shared_touch {
            let shard = lock.read();
            let found = shard.find(hash, key);
            if let Found::Hit(id, _) = found {
                shard.touch_shared(id);
            }
            found
        } else {
            let mut shard = lock.write();
            let found = shard.find(hash, key);
            if let Found::Hit(id, _) = found {
                shard.touch(id);
            }
            found
        };
        match found {
            Found::Hit(_, value) => {
                self.lookups.hit();
                Lookup::Hit(value)
            }
            Found::Miss => {
                self.lookups.miss();
                Lookup::Miss
            }
            Found::Collision => {
                self.lookups.miss();
                Lookup::Collision
            }
        }
    }

    /// Stores `value` for `key` as `mode` says (see [`InsertMode`]): `insert` is
    /// `insert_with(key, value, InsertMode::REPLACE)`.
    pub fn insert_with(&self, key: &[u8], value: Bytes, mode: InsertMode) -> Result<()> {
        let hash = self.hasher.hash_key(key);
        let mut shard = self.shard(hash).write();
        let result = shard.insert(hash, key, value, mode);
        self.report_evictions(shard);
        result
    }

    /// [`insert_with`](Self::insert_with) if `admit`, called under the shard's lock, says
    /// so (the cache checks there that no newer write of the key came first); `Ok(false)`
    /// when not admitted.
    pub(crate) fn insert_if(
        &self,
        key: &[u8],
        value: Bytes,
        mode: InsertMode,
        admit: impl FnOnce() -> bool,
    ) -> Result<bool> {
        let hash = self.hasher.hash_key(key);
        let mut shard = self.shard(hash).write();
        if !admit() {
            return Ok(false);
        }
        let result = shard.insert(hash, key, value, mode);
        self.report_evictions(shard);
        result.map(|()| true)
    }

    /// Hands what `shard` evicted to the listener, after releasing the lock.
    #[inline]
    fn report_evictions(&self, mut shard: RwLockWriteGuard<'_, Shard>) {
        if let Some(listener) = &self.listener {
            let evicted = shard.take_evicted();
            drop(shard);
            for (key, value) in evicted {
                listener.on_evict(key.as_slice(), &value);
            }
        }
    }

    /// Checks every shard's invariants (tests and fuzzing only).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self) {
        for shard in self.built_shards() {
            shard.read().validate();
        }
    }

    /// The shard of `hash`, built if this is its first use.
    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        let cell = if self.shards.len() == 1 {
            &self.shards[0]
        } else {
            // Mix before taking the top bits: the map inside the shard uses the hash as is,
            // and an injected hasher may put all its entropy in the low bits.
            let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            &self.shards[(mixed >> self.shard_shift) as usize]
        };
        cell.get_or_init(|| self.new_shard())
    }

    #[cold]
    fn new_shard(&self) -> RwLock<Shard> {
        RwLock::new(Shard::new(
            self.policy.build_builtin(),
            self.shard_bytes,
            self.shard_entries,
            self.max_value_size,
            self.listener.is_some(),
        ))
    }

    /// The shards built so far (one never used holds nothing).
    fn built_shards(&self) -> impl Iterator<Item = &RwLock<Shard>> {
        self.shards.iter().filter_map(OnceLock::get)
    }
}

/// Copies `value` to the front of `buf` if it fits, and writes nothing otherwise: the C-style
/// contract of `get_into`.
pub(crate) fn copy_if_fits(value: &[u8], buf: &mut [u8]) -> bool {
    match buf.get_mut(..value.len()) {
        Some(dst) => {
            dst.copy_from_slice(value);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests;
