//! Discardable GPU memory (seed 002): a client locks and unlocks its GPU resources through a
//! 32-bit word in shared memory, and one service deletes unlocked ones to keep every client
//! inside one global budget.
//!
//! - [`DiscardableHandle`]: one word in a memfd mapping (0 deleted, 1 unlocked, `n >= 2`
//!   locked `n - 1` times). The client locks with a compare-and-swap that never leaves its
//!   process; the service unlocks, deletes (only from 1) and force-deletes. The state machine
//!   itself is in [`word`], generic over the atomic so that a model checker can run it.
//! - [`ClientDiscardableManager`]: hands out handles from shared-memory pools.
//! - [`ServiceDiscardableManager`]: tracks (client, resource) → size and handle under one
//!   budget, evicting unlocked resources in the order of a [`gpucache::EvictionPolicy`].
//!
//! The service addresses a handle by (pool id, byte offset) in a pool it mapped from an fd,
//! so that a socket channel can sit in front of it; see docs/discardable.md.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

mod channel_client;
mod client;
pub mod frame_loop;
pub mod proto;
mod server;
mod service;
mod shm;
pub mod word;

pub use channel_client::ChannelClient;
pub use client::{ClientDiscardableManager, ClientHandle, HandleId};
pub use proto::{ClientMessage, DescError, ProtocolError, ResourceDesc, SyncReply, TexelFormat};
pub use server::{Backend, CountingBackend, Server, ServerConfig, ServerStats};
pub use service::{
    ClientId, ContextId, DeleteCallback, Deleted, MemoryPressure, ResourceId,
    ServiceDiscardableManager, ServiceStats,
};
pub use shm::{page_size, SharedMemory, MAX_POOL_SIZE, WORD_SIZE};

/// Names a shared-memory pool of one client.
pub type PoolId = u32;

/// What can go wrong. Every bad input from a client is one of these, never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed (memfd, mmap, fstat).
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A pool of this size cannot be made or mapped (empty, not whole words, too large).
    #[error("pool size {0} not accepted")]
    PoolSize(u64),
    /// The pool's fd is not a memfd sealed (or sealable) against shrinking.
    #[error("pool fd not sealed against shrinking")]
    NotSealed,
    /// The client is not registered with the service.
    #[error("unknown client {0}")]
    UnknownClient(ClientId),
    /// The client has no pool of this id.
    #[error("unknown pool {pool} of client {client}")]
    UnknownPool { client: ClientId, pool: PoolId },
    /// The client already registered a pool of this id.
    #[error("pool {pool} of client {client} already registered")]
    PoolExists { client: ClientId, pool: PoolId },
    /// The pool still holds live handles.
    #[error("pool {pool} of client {client} still in use")]
    PoolInUse { client: ClientId, pool: PoolId },
    /// The offset is not a multiple of 4 or lies outside the pool.
    #[error("bad offset {offset} in pool {pool}")]
    BadOffset { pool: PoolId, offset: u32 },
    /// The word is already the handle of a live resource.
    #[error("offset {offset} in pool {pool} already holds a live handle")]
    HandleInUse { pool: PoolId, offset: u32 },
    /// The resource is already initialised.
    #[error("resource {resource} of client {client} already initialised")]
    AlreadyInitialized {
        client: ClientId,
        resource: ResourceId,
    },
    /// The resource is not (or no longer) tracked.
    #[error("unknown resource {resource} of client {client}")]
    UnknownResource {
        client: ClientId,
        resource: ResourceId,
    },
    /// Unlock of a resource that is not locked (its word reads `word`).
    #[error("resource {resource} of client {client} is not locked (word {word})")]
    NotLocked {
        client: ClientId,
        resource: ResourceId,
        word: u32,
    },
    /// A new handle must start locked; its word reads `word`.
    #[error("handle not locked at initialise (word {0})")]
    NotLockedAtInit(u32),
    /// The size would take the service's total past `u64::MAX`.
    #[error("size {0} too large")]
    SizeTooLarge(u64),
    /// The client manager does not know this handle (freed or never made).
    #[error("unknown handle {0:?}")]
    UnknownHandle(HandleId),
    /// A frame on the channel could not be decoded (the connection is dropped).
    #[error("protocol: {0}")]
    Protocol(#[from] ProtocolError),
    /// A resource description the service refuses.
    #[error("resource description: {0}")]
    Desc(#[from] DescError),
    /// A pool registration arrived without its memfd.
    #[error("pool {0} registered without an fd")]
    MissingFd(PoolId),
    /// More fds arrived than pool registrations to carry them.
    #[error("{0} fds received without a pool registration")]
    TooManyFds(usize),
    /// The back end (GL) could not create or use the resource.
    #[error("back end: {0}")]
    Backend(String),
    /// The client sent more bad messages than the service tolerates (it is dropped).
    #[error("{0} refused messages: client dropped")]
    TooManyErrors(u32),
    /// The service closed the channel.
    #[error("channel closed by the service")]
    Closed,
}

/// One lock word in shared memory, shared by a client and the service.
#[derive(Clone, Debug)]
pub struct DiscardableHandle {
    mem: Arc<SharedMemory>,
    offset: u32,
}

impl DiscardableHandle {
    /// The handle at byte `offset` of `mem`; `None` unless the offset is aligned and inside.
    pub fn new(mem: Arc<SharedMemory>, offset: u32) -> Option<Self> {
        mem.word(offset)?;
        Some(DiscardableHandle { mem, offset })
    }

    fn w(&self) -> &std::sync::atomic::AtomicU32 {
        // Checked in `new`; the mapping is immutable in size.
        match self.mem.word(self.offset) {
            Some(w) => w,
            None => unreachable!("offset checked at construction"),
        }
    }

    /// Byte offset of the word in its pool.
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// The pool.
    pub fn memory(&self) -> &Arc<SharedMemory> {
        &self.mem
    }

    /// Sets the word to "locked once": a new handle (client side, before the service knows it).
    pub fn initialize_locked(&self) {
        self.w()
            .store(word::LOCKED_ONCE, std::sync::atomic::Ordering::Release)
    }

    /// Client: locks unless deleted; never leaves the process.
    #[inline]
    pub fn lock(&self) -> bool {
        word::lock(self.w())
    }

    /// Service: drops one lock; the new value, or `Err(seen)` when not locked.
    pub fn unlock(&self) -> Result<u32, u32> {
        word::unlock(self.w())
    }

    /// Service: deletes if unlocked (1 → 0); `Err(seen)` otherwise.
    pub fn delete(&self) -> Result<(), u32> {
        word::delete(self.w())
    }

    /// Service: deletes whatever the state.
    pub fn force_delete(&self) {
        word::force_delete(self.w())
    }

    /// The word now (a hint: it may change at once).
    pub fn value(&self) -> u32 {
        self.w().load(Relaxed)
    }

    /// Whether the word reads "deleted".
    pub fn is_deleted(&self) -> bool {
        self.value() == word::DELETED
    }
}
