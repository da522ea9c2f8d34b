//! gpucache: a shader and pipeline cache engine.
//!
//! The engine:
//! - [`Cache`]: the memory tier over an ordered list of lower tiers: a persistent,
//!   crash-safe, multi-process disk tier, and any [`Tier`] a front end adds (a fleet's
//!   remote tier). [`Lookup`] and [`InsertMode`] are the vocabulary every tier shares.
//! - [`Store`]: the memory tier, a thread-safe key/value blob store bounded by bytes and
//!   entries, with a pluggable [`EvictionPolicy`] (LRU or S3-FIFO).
//! - [`Identity`]: what entries depend on; every tier namespaces by it.
//! - [`MetadataStream`]: small files a front end keeps beside a cache's entries.
//! - [`metrics`]: the [`Counter`] and [`Histogram`] every part counts with;
//!   [`control`]: cache control by kind, which front ends register with; [`codec`]: the
//!   little-endian reader and writer of every binary format.
//!
//! The front ends, built on the engine's public API only (`docs/design.md`):
//! - [`session`]: D3D12-style cache sessions (identifier, version, limits, find/store with
//!   typed errors, a process-wide registry).
//! - [`egl`]: the EGL_ANDROID_blob_cache `set`/`get` contract over a process-global cache.
//! - [`inspect`]: inspection and maintenance of cache directories, for tools.
//!
//! The core is synchronous: no async runtime, plain threads where background work is needed.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cache;
pub mod codec;
pub mod control;
mod disk;
pub mod egl;
mod error;
mod hash;
mod identity;
pub mod inspect;
mod lookup;
pub mod metrics;
mod policy;
pub mod session;
mod store;
pub mod tier;

/// Entry points for the fuzz targets in `fuzz/`: every parser of on-disk bytes. Compiled
/// only with `--cfg fuzzing` (as `cargo fuzz` builds).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::disk::fuzzing::*;
}

pub use bytes::Bytes;
pub use cache::{Cache, CacheBuilder, CacheStats};
pub use codec::FormatError;
pub use control::{
    cache_control, developer_mode, shader_cache_support, CacheControl, CacheKinds,
    ShaderCacheSupport,
};
pub use disk::{DirAccess, DiskStats, MetadataStream};
pub use error::{Error, Result};
pub use hash::{KeyHasher, Xxh3KeyHasher};
pub use identity::{Identity, MAX_IDENTITY_LEN};
pub use lookup::{InsertMode, Lookup};
pub use metrics::{Counter, Histogram, HistogramSnapshot};
pub use policy::{EntryId, EvictionPolicy, Lru, PolicyKind, S3Fifo, TinyLfu};
pub use store::{
    EvictionListener, MemoryPressure, Store, StoreBuilder, StoreStats, ENTRY_OVERHEAD,
};
pub use tier::{Queued, Tier, TierStats};
