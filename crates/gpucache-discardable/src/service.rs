//! The service's manager: every client's discardable resources under one budget.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use gpucache::{EntryId, EvictionPolicy, PolicyKind};

use crate::shm::SharedMemory;
use crate::{word, DiscardableHandle, Error, PoolId};

/// Names a client (a connection) of the service.
pub type ClientId = u32;
/// Names a GL context (or context group) of the service; deletes are batched per context.
pub type ContextId = u32;
/// Names a client's resource (a texture id, a buffer id).
pub type ResourceId = u32;

/// A resource the service deleted (handed to the delete callback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// Its client.
    pub client: ClientId,
    /// The client's resource id.
    pub resource: ResourceId,
    /// Its size when deleted.
    pub size: u64,
}

/// Deletes resources of one context: called once per context per batch, so that the
/// caller switches contexts once.
pub type DeleteCallback = Box<dyn FnMut(ContextId, &[Deleted]) + Send>;

/// The system's memory-pressure level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryPressure {
    /// Keep at most a quarter of the budget.
    Moderate,
    /// Keep nothing unlocked.
    Critical,
}

/// The service's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// The budget.
    pub budget: u64,
    /// Bytes of every tracked resource, locked or not.
    pub total_bytes: u64,
    /// Bytes of resources the service holds as locked (not evictable).
    pub locked_bytes: u64,
    /// Tracked resources.
    pub resources: usize,
    /// Resources deleted to keep the budget (or under memory pressure).
    pub evictions: u64,
    /// Eviction attempts a client's lock won (the resource stayed).
    pub lock_races: u64,
    /// Calls of the delete callback.
    pub delete_batches: u64,
}

#[derive(Debug)]
struct Entry {
    client: ClientId,
    resource: ResourceId,
    context: ContextId,
    pool: PoolId,
    size: u64,
    handle: DiscardableHandle,
    /// Tracked by the policy: the service's own view that it is unlocked (evictable).
    unlocked: bool,
}

#[derive(Debug, Default)]
struct ClientState {
    pools: HashMap<PoolId, Arc<SharedMemory>>,
    resources: HashMap<ResourceId, EntryId>,
}

/// Tracks (client, resource) → size and handle for every client, under one global budget;
/// evicts unlocked resources in the order of an [`EvictionPolicy`].
///
/// The service's own table decides ownership and accounting: which client owns which
/// resource, its size, and whether the service holds it as unlocked. The shared word only
/// arbitrates the race between that one resource's client lock and the service's delete, so a
/// client writing garbage into its words can only lose (or keep locked) its own resources.
pub struct ServiceDiscardableManager {
    budget: u64,
    total: u64,
    locked: u64,
    kind: PolicyKind,
    policy: Box<dyn EvictionPolicy>,
    entries: Vec<Option<Entry>>,
    free_ids: Vec<EntryId>,
    clients: HashMap<ClientId, ClientState>,
    live_words: HashSet<(ClientId, PoolId, u32)>,
    pending: Vec<(ContextId, Deleted)>,
    on_delete: Option<DeleteCallback>,
    evictions: u64,
    lock_races: u64,
    delete_batches: u64,
}

impl std::fmt::Debug for ServiceDiscardableManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceDiscardableManager")
            .field("policy", &self.kind)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn key_hash(client: ClientId, resource: ResourceId) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&((u64::from(client) << 32) | u64::from(resource)).to_le_bytes())
}

impl ServiceDiscardableManager {
    /// A service keeping at most `budget` bytes (plus what is locked), evicting in `kind`'s order.
    pub fn new(budget: u64, kind: PolicyKind) -> Self {
        ServiceDiscardableManager {
            budget,
            total: 0,
            locked: 0,
            kind,
            policy: kind.build(),
            entries: Vec::new(),
            free_ids: Vec::new(),
            clients: HashMap::new(),
            live_words: HashSet::new(),
            pending: Vec::new(),
            on_delete: None,
            evictions: 0,
            lock_races: 0,
            delete_batches: 0,
        }
    }

    /// Sets the callback that deletes resources, batched per context.
    pub fn set_delete_callback(&mut self, cb: DeleteCallback) {
        self.on_delete = Some(cb);
    }

    /// The policy in use.
    pub fn policy_kind(&self) -> PolicyKind {
        self.kind
    }

    /// Registers a client (idempotent).
    pub fn add_client(&mut self, client: ClientId) {
        self.clients.entry(client).or_default();
    }

    /// Maps a pool the client sent as a memfd.
    pub fn register_pool_fd(
        &mut self,
        client: ClientId,
        pool: PoolId,
        fd: OwnedFd,
    ) -> Result<(), Error> {
        self.check_new_pool(client, pool)?;
        let mem = Arc::new(SharedMemory::from_fd(fd)?);
        self.register_pool(client, pool, mem)
    }

    fn check_new_pool(&self, client: ClientId, pool: PoolId) -> Result<(), Error> {
        let c = self
            .clients
            .get(&client)
            .ok_or(Error::UnknownClient(client))?;
        if c.pools.contains_key(&pool) {
            return Err(Error::PoolExists { client, pool });
        }
        Ok(())
    }

    /// Registers a pool already mapped in this process (a client in the same process).
    pub fn register_pool(
        &mut self,
        client: ClientId,
        pool: PoolId,
        mem: Arc<SharedMemory>,
    ) -> Result<(), Error> {
        self.check_new_pool(client, pool)?;
        if let Some(c) = self.clients.get_mut(&client) {
            c.pools.insert(pool, mem);
        }
        Ok(())
    }

    /// Unmaps a pool the client released; refused while a tracked resource uses it.
    pub fn release_pool(&mut self, client: ClientId, pool: PoolId) -> Result<(), Error> {
        let c = self
            .clients
            .get(&client)
            .ok_or(Error::UnknownClient(client))?;
        if !c.pools.contains_key(&pool) {
            return Err(Error::UnknownPool { client, pool });
        }
        if c.resources
            .values()
            .any(|&id| self.entry(id).is_some_and(|e| e.pool == pool))
        {
            return Err(Error::PoolInUse { client, pool });
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.pools.remove(&pool);
        }
        Ok(())
    }

    fn entry(&self, id: EntryId) -> Option<&Entry> {
        self.entries.get(id as usize)?.as_ref()
    }

    fn lookup(&self, client: ClientId, resource: ResourceId) -> Result<EntryId, Error> {
        let c = self
            .clients
            .get(&client)
            .ok_or(Error::UnknownClient(client))?;
        c.resources
            .get(&resource)
            .copied()
            .ok_or(Error::UnknownResource { client, resource })
    }

    /// Whether [`initialize`](Self::initialize) would accept the resource and its handle
    /// (all its checks but the size): a service checks this before it creates the object.
    pub fn check_initialize(
        &self,
        client: ClientId,
        resource: ResourceId,
        pool: PoolId,
        offset: u32,
    ) -> Result<(), Error> {
        let c = self
            .clients
            .get(&client)
            .ok_or(Error::UnknownClient(client))?;
        if c.resources.contains_key(&resource) {
            return Err(Error::AlreadyInitialized { client, resource });
        }
        let mem = c
            .pools
            .get(&pool)
            .ok_or(Error::UnknownPool { client, pool })?;
        let w = mem.word(offset).ok_or(Error::BadOffset { pool, offset })?;
        if self.live_words.contains(&(client, pool, offset)) {
            return Err(Error::HandleInUse { pool, offset });
        }
        let w = w.load(std::sync::atomic::Ordering::Relaxed);
        if w < word::LOCKED_ONCE {
            return Err(Error::NotLockedAtInit(w));
        }
        Ok(())
    }

    /// Tracks a new resource of `size` bytes whose handle is the word at `offset` of the
    /// client's `pool`; the handle must read locked. Enforces the budget.
    pub fn initialize(
        &mut self,
        client: ClientId,
        context: ContextId,
        resource: ResourceId,
        pool: PoolId,
        offset: u32,
        size: u64,
    ) -> Result<(), Error> {
        self.check_initialize(client, resource, pool, offset)?;
        let total = self
            .total
            .checked_add(size)
            .ok_or(Error::SizeTooLarge(size))?;
        let mem = self
            .clients
            .get(&client)
            .and_then(|c| c.pools.get(&pool))
            .ok_or(Error::UnknownPool { client, pool })?;
        let handle =
            DiscardableHandle::new(mem.clone(), offset).ok_or(Error::BadOffset { pool, offset })?;
        let entry = Entry {
            client,
            resource,
            context,
            pool,
            size,
            handle,
            unlocked: false,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.entries[id as usize] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as EntryId
            }
        };
        self.live_words.insert((client, pool, offset));
        if let Some(c) = self.clients.get_mut(&client) {
            c.resources.insert(resource, id);
        }
        self.total = total;
        self.locked += size;
        self.enforce(self.budget);
        self.flush();
        Ok(())
    }

    /// Drops one lock of the resource (ordered after the client's use of it). When the word
    /// reaches "unlocked", the resource becomes evictable and counts as used. Enforces the budget.
    pub fn unlock(&mut self, client: ClientId, resource: ResourceId) -> Result<(), Error> {
        let id = self.lookup(client, resource)?;
        let Some(e) = self.entries.get_mut(id as usize).and_then(Option::as_mut) else {
            return Err(Error::UnknownResource { client, resource });
        };
        let now = e.handle.unlock().map_err(|word| Error::NotLocked {
            client,
            resource,
            word,
        })?;
        if now == word::UNLOCKED {
            if e.unlocked {
                self.policy.touch(id);
            } else {
                e.unlocked = true;
                self.locked -= e.size;
                self.policy.insert(id, key_hash(client, resource), e.size);
            }
        } else if e.unlocked {
            // Still locked by the client: the service learns it and stops offering it.
            e.unlocked = false;
            self.locked += e.size;
            self.policy.remove(id);
        }
        self.enforce(self.budget);
        self.flush();
        Ok(())
    }

    /// The resource's size changed (a texture gained levels). Enforces the budget.
    pub fn resize(
        &mut self,
        client: ClientId,
        resource: ResourceId,
        size: u64,
    ) -> Result<(), Error> {
        let id = self.lookup(client, resource)?;
        let Some(e) = self.entries.get_mut(id as usize).and_then(Option::as_mut) else {
            return Err(Error::UnknownResource { client, resource });
        };
        self.total = (self.total - e.size)
            .checked_add(size)
            .ok_or(Error::SizeTooLarge(size))?;
        if e.unlocked {
            self.policy.update(id, size);
        } else {
            self.locked = self.locked - e.size + size;
        }
        e.size = size;
        self.enforce(self.budget);
        self.flush();
        Ok(())
    }

    /// The client deleted its resource: the handle is force-deleted (so that the client may
    /// reuse its slot) and the resource goes to the delete callback.
    pub fn delete(&mut self, client: ClientId, resource: ResourceId) -> Result<(), Error> {
        let id = self.lookup(client, resource)?;
        self.remove(id, true, true);
        self.flush();
        Ok(())
    }

    /// Changes the budget and enforces it.
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        self.enforce(budget);
        self.flush();
    }

    /// Frees memory under pressure: moderate keeps at most a quarter of the budget,
    /// critical keeps nothing unlocked. The budget itself is unchanged.
    pub fn memory_pressure(&mut self, level: MemoryPressure) {
        let limit = match level {
            MemoryPressure::Moderate => self.budget / 4,
            MemoryPressure::Critical => 0,
        };
        self.enforce(limit);
        self.flush();
    }

    /// The context is lost: its resources are gone with it. Their handles are force-deleted
    /// and they are forgotten without the delete callback. Returns how many.
    pub fn context_lost(&mut self, context: ContextId) -> usize {
        let ids = self.ids_where(|e| e.context == context);
        for &id in &ids {
            self.remove(id, true, false);
        }
        ids.len()
    }

    /// The client disconnected or died: its resources are deleted (batched per context) and
    /// its pools unmapped. Returns how many resources.
    pub fn remove_client(&mut self, client: ClientId) -> Result<usize, Error> {
        if !self.clients.contains_key(&client) {
            return Err(Error::UnknownClient(client));
        }
        let ids = self.ids_where(|e| e.client == client);
        for &id in &ids {
            self.remove(id, true, true);
        }
        self.clients.remove(&client);
        self.flush();
        Ok(ids.len())
    }

    /// Deletes every resource (force-deleting the handles), batched per context.
    pub fn shutdown(&mut self) {
        let ids = self.ids_where(|_| true);
        for id in ids {
            self.remove(id, true, true);
        }
        self.flush();
    }

    /// Whether the resource is tracked.
    pub fn contains(&self, client: ClientId, resource: ResourceId) -> bool {
        self.lookup(client, resource).is_ok()
    }

    /// The resource's size, if tracked.
    pub fn size_of(&self, client: ClientId, resource: ResourceId) -> Option<u64> {
        let id = self.lookup(client, resource).ok()?;
        self.entry(id).map(|e| e.size)
    }

    /// The resource's lock word now (a hint: the client may change it at once).
    pub fn word_of(&self, client: ClientId, resource: ResourceId) -> Option<u32> {
        let id = self.lookup(client, resource).ok()?;
        self.entry(id).map(|e| e.handle.value())
    }

    /// Resources tracked for `client`.
    pub fn resource_count(&self, client: ClientId) -> usize {
        self.clients.get(&client).map_or(0, |c| c.resources.len())
    }

    /// Whether the service holds the resource as unlocked (evictable).
    pub fn is_unlocked(&self, client: ClientId, resource: ResourceId) -> Option<bool> {
        let id = self.lookup(client, resource).ok()?;
        self.entry(id).map(|e| e.unlocked)
    }

    /// The counts.
    pub fn stats(&self) -> ServiceStats {
        ServiceStats {
            budget: self.budget,
            total_bytes: self.total,
            locked_bytes: self.locked,
            resources: self.entries.len() - self.free_ids.len(),
            evictions: self.evictions,
            lock_races: self.lock_races,
            delete_batches: self.delete_batches,
        }
    }

    /// Number of pools mapped for `client`.
    pub fn pool_count(&self, client: ClientId) -> usize {
        self.clients.get(&client).map_or(0, |c| c.pools.len())
    }

    fn ids_where(&self, f: impl Fn(&Entry) -> bool) -> Vec<EntryId> {
        (0..self.entries.len() as EntryId)
            .filter(|&id| self.entry(id).is_some_and(&f))
            .collect()
    }

    /// Forgets entry `id`; with `force`, force-deletes its word; with `callback`, queues the
    /// resource for the delete callback. The caller has already taken it out of the policy
    /// when it came from `evict`.
    fn remove(&mut self, id: EntryId, force: bool, callback: bool) {
        let Some(e) = self.entries.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        if e.unlocked {
            self.policy.remove(id);
        } else {
            self.locked -= e.size;
        }
        self.finish_removal(id, e, force, callback);
    }

    fn finish_removal(&mut self, id: EntryId, e: Entry, force: bool, callback: bool) {
        if force {
            e.handle.force_delete();
        }
        self.total -= e.size;
        self.free_ids.push(id);
        self.live_words
            .remove(&(e.client, e.pool, e.handle.offset()));
        if let Some(c) = self.clients.get_mut(&e.client) {
            c.resources.remove(&e.resource);
        }
        if callback {
            let d = Deleted {
                client: e.client,
                resource: e.resource,
                size: e.size,
            };
            self.pending.push((e.context, d));
        }
    }

    /// Deletes unlocked resources in policy order until at most `limit` bytes are tracked or
    /// nothing unlocked is left. A victim its client has locked again stays (held as locked).
    fn enforce(&mut self, limit: u64) {
        while self.total > limit {
            let Some(id) = self.policy.evict() else {
                break;
            };
            let Some(e) = self.entries.get_mut(id as usize).and_then(Option::as_mut) else {
                continue;
            };
            e.unlocked = false;
            match e.handle.delete() {
                // Deleted; or the client scribbled 0 over its own word: its loss.
                Ok(()) | Err(word::DELETED) => {
                    if let Some(e) = self.entries.get_mut(id as usize).and_then(Option::take) {
                        self.evictions += 1;
                        self.finish_removal(id, e, false, true);
                    }
                }
                Err(_) => {
                    self.locked += e.size;
                    self.lock_races += 1;
                }
            }
        }
    }

    /// Hands queued deletions to the callback, one call per context.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|&(ctx, _)| ctx);
        let mut batch = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            let ctx = pending[i].0;
            batch.clear();
            while i < pending.len() && pending[i].0 == ctx {
                batch.push(pending[i].1);
                i += 1;
            }
            if let Some(cb) = self.on_delete.as_mut() {
                cb(ctx, &batch);
                self.delete_batches += 1;
            }
        }
    }
}

impl Drop for ServiceDiscardableManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}
