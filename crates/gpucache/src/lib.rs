//! gpucache: a shader and pipeline cache engine.
//!
//! - [`Cache`]: the memory tier over a persistent, crash-safe, multi-process disk tier.
//! - [`Store`]: the memory tier, a thread-safe key/value blob store bounded by bytes and
//!   entries, with a pluggable [`EvictionPolicy`] (LRU or S3-FIFO).
//! - [`session`]: D3D12-style cache sessions (identifier, version, limits, find/store with
//!   typed errors, a process-wide registry, cache control by kind).
//! - [`egl`]: the EGL_ANDROID_blob_cache `set`/`get` contract over a process-global cache.
//!
//! The core is synchronous: no async runtime, plain threads where background work is needed.
#![warn(missing_docs)]

mod cache;
mod disk;
pub mod egl;
mod error;
mod hash;
pub mod inspect;
mod policy;
pub mod session;
mod store;

/// Entry points for the fuzz targets in `fuzz/`: every parser of on-disk bytes. Not part of
/// the supported API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::disk::format::{
        decode_index_entry, decode_meta, decode_record, decode_segment_header, encode_meta,
        encode_segment_header, Meta, SegmentFile,
    };
}

pub use bytes::Bytes;
pub use cache::{Cache, CacheBuilder, CacheStats};
pub use disk::DiskStats;
pub use error::{Error, Result};
pub use hash::{KeyHasher, Xxh3KeyHasher};
pub use policy::{EntryId, EvictionPolicy, Lru, PolicyKind, S3Fifo};
pub use session::{cache_control, CacheControl, CacheKinds};
pub use store::{MemoryPressure, Store, StoreBuilder, StoreStats, ENTRY_OVERHEAD};
