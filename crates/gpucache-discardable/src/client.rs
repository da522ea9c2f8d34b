//! The client's manager: handles carved from shared-memory pools.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::shm::{page_size, SharedMemory, WORD_SIZE};
use crate::{word, DiscardableHandle, Error, PoolId};

/// Names one handle of a client; never reused within a manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleId(pub u64);

/// Hashes handle ids (sequential integers) with one multiply: the map sits on the lock path.
#[derive(Clone, Copy, Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A handle the client made: what it sends to the service with the resource's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHandle {
    /// The handle's id (client-local).
    pub id: HandleId,
    /// The pool holding its word.
    pub pool: PoolId,
    /// Byte offset of the word in the pool.
    pub offset: u32,
}

#[derive(Debug)]
struct Pool {
    mem: Arc<SharedMemory>,
    /// Free word ranges: start word → length in words; neighbours are always merged.
    free: BTreeMap<u32, u32>,
    /// Slots handed out and not yet back on the free list (live or awaiting deletion).
    used: u32,
}

impl Pool {
    fn take(&mut self) -> Option<u32> {
        let (&start, &len) = self.free.iter().next()?;
        self.free.remove(&start);
        if len > 1 {
            self.free.insert(start + 1, len - 1);
        }
        self.used += 1;
        Some(start)
    }

    fn give_back(&mut self, slot: u32) {
        let (mut start, mut len) = (slot, 1);
        if let Some((&ps, &pl)) = self.free.range(..slot).next_back() {
            if ps + pl == slot {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(slot + 1)) {
            len += nl;
        }
        self.free.insert(start, len);
        self.used -= 1;
    }
}

/// Hands out [`DiscardableHandle`]s from pools of shared memory (at least a page each), with
/// a free list that merges neighbouring ranges. A freed slot returns to the free list only
/// once the service has deleted what it held (its word reads 0); handle ids are never
/// reused; a pool whose slots are all free is released.
#[derive(Debug)]
pub struct ClientDiscardableManager {
    pool_bytes: usize,
    pools: BTreeMap<PoolId, Pool>,
    handles: HashMap<HandleId, (PoolId, DiscardableHandle), BuildHasherDefault<IdHasher>>,
    /// Freed by the client, not yet deleted by the service: (pool, slot).
    pending: Vec<(PoolId, u32)>,
    next_handle: u64,
    next_pool: PoolId,
    new_pools: Vec<PoolId>,
    released_pools: Vec<PoolId>,
}

impl Default for ClientDiscardableManager {
    fn default() -> Self {
        Self::new(page_size())
    }
}

impl ClientDiscardableManager {
    /// A manager whose pools hold `pool_bytes` each (rounded up to whole pages).
    pub fn new(pool_bytes: usize) -> Self {
        let page = page_size();
        ClientDiscardableManager {
            pool_bytes: pool_bytes.max(1).div_ceil(page) * page,
            pools: BTreeMap::new(),
            handles: HashMap::default(),
            pending: Vec::new(),
            next_handle: 1,
            next_pool: 1,
            new_pools: Vec::new(),
            released_pools: Vec::new(),
        }
    }

    /// A new handle, locked once.
    pub fn initialize(&mut self) -> Result<ClientHandle, Error> {
        self.reclaim();
        let found = self
            .pools
            .iter_mut()
            .find_map(|(&id, p)| p.take().map(|slot| (id, slot)));
        let (pool, slot) = match found {
            Some(x) => x,
            None => {
                let mem = Arc::new(SharedMemory::create(self.pool_bytes, false)?);
                let words = mem.words();
                let id = self.next_pool;
                self.next_pool = self.next_pool.wrapping_add(1).max(1);
                let mut p = Pool {
                    mem,
                    free: BTreeMap::from([(0, words)]),
                    used: 0,
                };
                let slot = p.take().ok_or(Error::PoolSize(self.pool_bytes as u64))?;
                self.pools.insert(id, p);
                self.new_pools.push(id);
                (id, slot)
            }
        };
        let offset = slot * WORD_SIZE;
        let h = self
            .handle_at(pool, offset)
            .ok_or(Error::BadOffset { pool, offset })?;
        h.initialize_locked();
        let id = HandleId(self.next_handle);
        self.next_handle += 1;
        self.handles.insert(id, (pool, h));
        Ok(ClientHandle { id, pool, offset })
    }

    fn handle_at(&self, pool: PoolId, offset: u32) -> Option<DiscardableHandle> {
        DiscardableHandle::new(self.pools.get(&pool)?.mem.clone(), offset)
    }

    /// The handle of `id` (keep it to lock without a map lookup).
    pub fn handle(&self, id: HandleId) -> Option<DiscardableHandle> {
        self.handles.get(&id).map(|(_, h)| h.clone())
    }

    /// Locks `id` through shared memory: `Ok(false)` when the service deleted it.
    pub fn lock(&self, id: HandleId) -> Result<bool, Error> {
        let (_, h) = self.handles.get(&id).ok_or(Error::UnknownHandle(id))?;
        Ok(h.lock())
    }

    /// Forgets `id` (the client deleted its resource and told the service). Its slot is
    /// reused once the service has deleted the handle.
    pub fn free(&mut self, id: HandleId) -> Result<(), Error> {
        let (pool, h) = self.handles.remove(&id).ok_or(Error::UnknownHandle(id))?;
        self.pending.push((pool, h.offset() / WORD_SIZE));
        self.reclaim();
        Ok(())
    }

    /// Returns the slots of freed handles the service has deleted to the free lists, and
    /// releases pools left empty.
    pub fn reclaim(&mut self) {
        let pools = &mut self.pools;
        let mut emptied = Vec::new();
        self.pending.retain(|&(pool, slot)| {
            let Some(p) = pools.get_mut(&pool) else {
                return false;
            };
            let deleted = p
                .mem
                .word(slot * WORD_SIZE)
                .is_some_and(|w| w.load(std::sync::atomic::Ordering::Acquire) == word::DELETED);
            if deleted {
                p.give_back(slot);
                if p.used == 0 {
                    emptied.push(pool);
                }
            }
            !deleted
        });
        for pool in emptied {
            if self.pools.get(&pool).is_some_and(|p| p.used == 0) {
                self.pools.remove(&pool);
                self.released_pools.push(pool);
            }
        }
    }

    /// The memfd of `pool`, to send to the service.
    pub fn pool_fd(&self, pool: PoolId) -> Option<BorrowedFd<'_>> {
        self.pools.get(&pool).map(|p| p.mem.fd())
    }

    /// The mapping of `pool` (a service in the same process registers it directly).
    pub fn pool_memory(&self, pool: PoolId) -> Option<&Arc<SharedMemory>> {
        self.pools.get(&pool).map(|p| &p.mem)
    }

    /// Pools made since the last call (the channel registers them with the service).
    pub fn take_new_pools(&mut self) -> Vec<PoolId> {
        std::mem::take(&mut self.new_pools)
    }

    /// Pools released since the last call (the channel tells the service).
    pub fn take_released_pools(&mut self) -> Vec<PoolId> {
        std::mem::take(&mut self.released_pools)
    }

    /// Number of pools mapped.
    pub fn pool_count(&self) -> usize {
        self.pools.len()
    }

    /// Number of live handles.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    /// Number of freed handles awaiting the service's delete.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// The free ranges of `pool` as (start word, length in words), in order.
    pub fn free_ranges(&self, pool: PoolId) -> Vec<(u32, u32)> {
        self.pools
            .get(&pool)
            .map(|p| p.free.iter().map(|(&s, &l)| (s, l)).collect())
            .unwrap_or_default()
    }
}
